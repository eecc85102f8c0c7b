package cluster

import (
	"bufio"
	"os"
	"path/filepath"
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

// lastLevelCache is the size in bytes of CPU 0's largest cache (sysfs), 0
// if unknown.
func lastLevelCache() int64 {
	dirs, _ := filepath.Glob("/sys/devices/system/cpu/cpu0/cache/index*")
	var best int64
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "size"))
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(b))
		mult := int64(1)
		switch {
		case strings.HasSuffix(v, "K"):
			mult, v = 1<<10, strings.TrimSuffix(v, "K")
		case strings.HasSuffix(v, "M"):
			mult, v = 1<<20, strings.TrimSuffix(v, "M")
		}
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			best = max(best, n*mult)
		}
	}
	return best
}
