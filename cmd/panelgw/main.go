// Command panelgw is a small reference gateway for deskd: it mints panel
// tokens, answers POST /sandboxes/{id}/desktop/start|stop and GET
// .../status like the control plane's gateway, and reverse-proxies
// /panel/<token>/ (HTTP and WebSocket) to the sandbox's deskd. Used for
// local runs and end-to-end tests.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/cubepod/deskd/panel"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	m := &Main{}
	if err := m.ParseFlags(os.Args[1:], os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) || errors.Is(err, errPrinted) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "panelgw:", err)
		os.Exit(2)
	}
	if err := m.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "panelgw:", err)
		os.Exit(1)
	}
}

// Main is panelgw, apart from process globals.
type Main struct {
	Stdout    io.Writer // default os.Stdout
	Listen    string
	Config    panel.GatewayConfig
	listener  net.Listener
	sandboxes sandboxFlag
}

type sandboxFlag map[string]*url.URL

func (s sandboxFlag) String() string { return "" }

func (s sandboxFlag) Set(v string) error {
	id, u, err := panel.ParseSandbox(v)
	if err != nil {
		return err
	}
	s[id] = u
	return nil
}

func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

// errPrinted ends a run that only printed something (--print-key).
var errPrinted = errors.New("printed")

// ParseFlags reads flags with PANELGW_* env fallbacks.
func (m *Main) ParseFlags(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("panelgw", flag.ContinueOnError)
	fs.SetOutput(stderr)
	m.sandboxes = sandboxFlag{}
	fs.StringVar(&m.Listen, "listen", env("PANELGW_LISTEN", "127.0.0.1:8081"), "address to serve (env PANELGW_LISTEN)")
	secret := fs.String("secret", env("PANELGW_SECRET", ""), "master secret; each sandbox's deskd holds only its own key, derived from it (see --print-key) (env PANELGW_SECRET)")
	fs.Var(m.sandboxes, "sandbox", "ID=URL of a sandbox's deskd, repeatable (env PANELGW_SANDBOXES, comma separated; default local=http://127.0.0.1:8080)")
	ttl := fs.Duration("ttl", time.Hour, "lifetime of minted tokens")
	fs.StringVar(&m.Config.PublicURL, "public-url", env("PANELGW_PUBLIC_URL", ""), "public base URL for returned links (env PANELGW_PUBLIC_URL)")
	fs.StringVar(&m.Config.APIKey, "api-key", env("PANELGW_API_KEY", ""), "bearer key required on /sandboxes (env PANELGW_API_KEY)")
	printKey := fs.String("print-key", "", "print the panel key of sandbox ID (give it to that sandbox's deskd as --panel-secret-file) and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *printKey != "" {
		if *secret == "" {
			return errors.New("--print-key needs --secret")
		}
		fmt.Fprintln(m.out(), panel.SandboxKey([]byte(*secret), *printKey))
		return errPrinted
	}
	if len(m.sandboxes) == 0 {
		list := env("PANELGW_SANDBOXES", "local=http://127.0.0.1:8080")
		for _, s := range strings.Split(list, ",") {
			if err := m.sandboxes.Set(strings.TrimSpace(s)); err != nil {
				return err
			}
		}
	}
	if *secret == "" {
		return errors.New("--secret is required")
	}
	m.Config.Secret = []byte(*secret)
	m.Config.Sandboxes = m.sandboxes
	m.Config.TTL = *ttl
	m.Config.Logger = slog.New(slog.NewTextHandler(stderr, nil))
	return nil
}

func (m *Main) out() io.Writer {
	if m.Stdout != nil {
		return m.Stdout
	}
	return os.Stdout
}

// Run serves until ctx ends.
func (m *Main) Run(ctx context.Context) error {
	g, err := panel.NewGateway(m.Config)
	if err != nil {
		return err
	}
	if m.listener == nil {
		if m.listener, err = net.Listen("tcp", m.Listen); err != nil {
			return err
		}
	}
	// Requests hang off base; cancelling it after Shutdown ends the
	// WebSocket tunnels, which Shutdown itself does not wait for or close.
	base, cancelBase := context.WithCancel(context.Background())
	defer cancelBase()
	srv := &http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return base }}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(m.listener) }() // ends at Shutdown below
	m.Config.Logger.Info("panelgw serving", "addr", m.listener.Addr().String())
	select {
	case <-ctx.Done():
	case err := <-errc:
		return err
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	cancelBase()
	if errors.Is(err, context.DeadlineExceeded) {
		err = srv.Close()
	}
	<-errc
	return err
}
