package testenv

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Proc is a process (a `kgc run`) whose output goes to a log file.
type Proc struct {
	// Name names the process in messages.
	Name string
	// Note, when set, is shown next to Name in the header of the dumped log
	// (say, the process's Lease holder identity).
	Note string

	cmd      *exec.Cmd
	logPath  string
	timeout  time.Duration
	exited   chan struct{}
	exitCode int
}

// StartProc starts binary with args, its output going to a log file in
// t.TempDir(). A cleanup kills and reaps it, and dumps its log if t failed
// or Verbose. Wait and Kill give up on the process after timeout.
func StartProc(t *testing.T, name string, timeout time.Duration, binary string, args ...string) *Proc {
	t.Helper()
	p := &Proc{Name: name, logPath: filepath.Join(t.TempDir(), name+".log"), timeout: timeout, exited: make(chan struct{})}
	logFile, err := os.Create(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(binary, args...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("starting kgc %s: %v", name, err)
	}
	go func() {
		err := p.cmd.Wait()
		logFile.Close()
		p.exitCode = p.cmd.ProcessState.ExitCode()
		if err != nil && p.exitCode == 0 {
			p.exitCode = -1
		}
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.Kill(t)
		if t.Failed() || Verbose {
			p.DumpLog(t)
		}
	})
	return p
}

// Log returns what the process wrote so far.
func (p *Proc) Log(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Line returns the first log line containing s, or "".
func (p *Proc) Line(t *testing.T, s string) string {
	t.Helper()
	for l := range strings.Lines(p.Log(t)) {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

// Count returns how many times s occurs in the log.
func (p *Proc) Count(t *testing.T, s string) int {
	t.Helper()
	return strings.Count(p.Log(t), s)
}

// Signal sends sig to the process (nothing if it has exited).
func (p *Proc) Signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("signalling kgc %s: %v", p.Name, err)
	}
}

// Kill SIGKILLs the process and waits until it is reaped.
func (p *Proc) Kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("killing kgc %s: %v", p.Name, err)
	}
	p.Wait(t)
}

// Wait waits for the process to exit and returns its exit code (-1 when it
// did not exit normally).
func (p *Proc) Wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.exited:
		return p.exitCode
	case <-time.After(p.timeout):
		t.Fatalf("kgc %s did not exit within %s", p.Name, p.timeout)
		return 0
	}
}

// Exited returns the exit code and true once the process has exited.
func (p *Proc) Exited() (int, bool) {
	select {
	case <-p.exited:
		return p.exitCode, true
	default:
		return 0, false
	}
}

var dumpMu sync.Mutex

// DumpLog logs the process's log into t's output.
func (p *Proc) DumpLog(t *testing.T) {
	t.Helper()
	dumpMu.Lock()
	defer dumpMu.Unlock()
	name := p.Name
	if p.Note != "" {
		name += " (" + p.Note + ")"
	}
	t.Logf("----- kgc %s log -----\n%s----- end of kgc %s log -----", name, p.Log(t), p.Name)
}
