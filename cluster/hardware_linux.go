package cluster

import (
	"bufio"
	"os"
	"runtime"
	"strconv"
	"strings"
)

func detectHardware() Hardware {
	h := Hardware{Cores: runtime.NumCPU()}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if !ok {
				continue
			}
			k = strings.TrimSpace(k)
			if k == "model name" || k == "Model" || k == "Hardware" {
				h.Chip = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) >= 2 && fields[0] == "MemTotal:" {
				if kb, err := strconv.ParseInt(fields[1], 10, 64); err == nil {
					h.MemoryMB = kb / 1024
				}
				break
			}
		}
		f.Close()
	}
	return h
}
