package discovery

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/mdns"
)

// MDNS is the multicast DNS transport (hashicorp/mdns: pure Go, so it builds
// for darwin without cgo). It binds UDP port 5353 next to the system's own
// responder (Bonjour on macOS), which the OS allows with SO_REUSEADDR/PORT.
type MDNS struct {
	// Interface names the interface to use ("" = system default).
	Interface string
	// DisableIPv6 queries over IPv4 only.
	DisableIPv6 bool
	Logger      *slog.Logger
}

func (m *MDNS) iface() (*net.Interface, error) {
	if m.Interface == "" {
		return nil, nil
	}
	ifi, err := net.InterfaceByName(m.Interface)
	if err != nil {
		return nil, fmt.Errorf("interface %q: %w", m.Interface, err)
	}
	return ifi, nil
}

func (m *MDNS) logger() *slog.Logger {
	if m.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return m.Logger
}

// Advertise implements Transport.
func (m *MDNS) Advertise(service, domain string, e Entry) (func() error, error) {
	ifi, err := m.iface()
	if err != nil {
		return nil, err
	}
	domain = strings.Trim(domain, ".") + "."
	host := e.Instance + "." + domain
	zone, err := mdns.NewMDNSService(e.Instance, service, domain, host, e.Port, e.Addrs, e.TXT)
	if err != nil {
		return nil, err
	}
	srv, err := mdns.NewServer(&mdns.Config{Zone: zone, Iface: ifi,
		Logger: slog.NewLogLogger(m.logger().Handler(), slog.LevelDebug)})
	if err != nil {
		return nil, err
	}
	var once sync.Once
	return func() error {
		var err error
		once.Do(func() { err = srv.Shutdown() })
		return err
	}, nil
}

// Browse implements Transport.
func (m *MDNS) Browse(ctx context.Context, service, domain string, timeout time.Duration) ([]Entry, error) {
	ifi, err := m.iface()
	if err != nil {
		return nil, err
	}
	ch := make(chan *mdns.ServiceEntry, 64)
	params := &mdns.QueryParam{
		Service:     service,
		Domain:      strings.Trim(domain, "."),
		Timeout:     timeout,
		Interface:   ifi,
		Entries:     ch,
		DisableIPv6: m.DisableIPv6,
		Logger:      slog.NewLogLogger(m.logger().Handler(), slog.LevelDebug),
	}
	var entries []Entry
	done := make(chan struct{})
	go func() {
		defer close(done)
		suffix := "." + strings.Trim(service, ".") + "." + strings.Trim(domain, ".") + "."
		for se := range ch {
			e := Entry{Instance: unescape(strings.TrimSuffix(se.Name, suffix)), Port: se.Port, TXT: se.InfoFields}
			if se.AddrV4 != nil {
				e.Addrs = append(e.Addrs, se.AddrV4)
			}
			if se.AddrV6IPAddr != nil {
				e.Addrs = append(e.Addrs, se.AddrV6IPAddr.IP)
			}
			entries = append(entries, e)
		}
	}()
	err = mdns.QueryContext(ctx, params)
	close(ch) // QueryContext has returned: nothing sends any more
	<-done
	if err != nil && ctx.Err() == nil {
		return entries, err
	}
	return entries, nil
}

// unescape undoes DNS presentation escaping in an instance label ("\ " etc.).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
