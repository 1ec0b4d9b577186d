package serve

import (
	"time"
)

// These set what the fault tests need of Config and name its errors, in
// one place.

func withAdminKeys(cfg *Config, path string) { cfg.AdminKeysFile = path }

func withDegradedFrozen(cfg *Config) { cfg.Degraded = DegradedFrozen }

func withAllowLostState(cfg *Config) { cfg.AllowLostState = true }

// withFastRetry makes failed saves tried again within a test's time.
func withFastRetry(cfg *Config) {
	cfg.SaveRetry, cfg.SaveRetryMax = 20*time.Millisecond, 200*time.Millisecond
}

// withSlowRetry makes failed saves wait an hour before they are tried again.
func withSlowRetry(cfg *Config) { cfg.SaveRetry, cfg.SaveRetryMax = time.Hour, time.Hour }

// adapted says whether a stream's answer says it adapted.
func adapted(a *StreamAnswer) bool { return a != nil && a.Adapted }

var errUnsavedStreams = ErrUnsaved
