// Command dflockd: the entry point of the dflockd lock server, written for sema-native's test setup.
//
// The published dflockd v1.10.0 source tree ships without its cmd/dflockd folder (its .gitignore pattern
// `dflockd` hides it), so scripts/dflockd-server.js copies the module into .tools/dflockd-src/ and puts this
// file at cmd/dflockd/main.go there. It does what the server's README documents: flags and DFLOCKD_*
// variables through internal/config.Load, `--no-auto-release-on-disconnect` as the negation of
// `--auto-release-on-disconnect`, `--version`, `--debug`, and a graceful drain on SIGINT/SIGTERM.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/mtingers/dflockd/internal/config"
	"github.com/mtingers/dflockd/internal/lock"
	"github.com/mtingers/dflockd/internal/server"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// normaliseArgs rewrites the documented `--no-auto-release-on-disconnect` into the form Go's flag package
// understands (`--auto-release-on-disconnect=false`); every other argument passes through unchanged.
func normaliseArgs(args []string) []string {
	out := make([]string, 0, len(args))
	for _, a := range args {
		switch a {
		case "--no-auto-release-on-disconnect", "-no-auto-release-on-disconnect":
			out = append(out, "--auto-release-on-disconnect=false")
		default:
			out = append(out, a)
		}
	}
	return out
}

func main() {
	cfg, err := config.Load(normaliseArgs(os.Args[1:]))
	if err != nil {
		fmt.Fprintf(os.Stderr, "dflockd: %v\n", err)
		os.Exit(2)
	}
	if cfg.Version {
		fmt.Println("dflockd", version)
		return
	}
	level := slog.LevelInfo
	if cfg.Debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	lm := lock.NewLockManager(cfg, log)
	srv := server.New(lm, cfg, log)
	log.Info("dflockd starting", "version", version, "auth", cfg.AuthToken != "", "tls", cfg.TLSCert != "")
	if err := srv.Run(ctx); err != nil {
		log.Error("server stopped", "err", err)
		os.Exit(1)
	}
}
