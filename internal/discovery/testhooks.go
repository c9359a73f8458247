package discovery

import "k8s.io/utils/clock"

// SetClock makes the monitors started from now on back off on clk instead
// of the real clock (deterministic tests). Call it before the first Sync.
func (m *Monitors) SetClock(clk clock.WithTicker) {
	m.mu.Lock()
	m.clock = clk
	m.mu.Unlock()
}
