package sim

import (
	"bufio"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// A schedule is the list of scheduler steps a random run took, recorded as
// Actions that name objects by their coordinates instead of their UIDs, so
// that any subsequence of it can be replayed (Replay) and a failing
// schedule shrunk to a minimal one (Shrink). Its text form, one action a
// line (Action.String, ParseSchedule), is what a failure prints and what
// KGC_SIM_SCHEDULE replays.

// Ops of an Action.
const (
	OpFaults    = "faults"     // Rate: the collector's calls fail at this rate
	OpCreate    = "create"     // GR Namespace/Name Finalizers Refs
	OpStart     = "start"      // Stream: start the collector, listing by streaming or by pages
	OpRestart   = "restart"    // Stream: stop the collector and start a new one
	OpDelete    = "delete"     // GR Namespace/Name Policy (a client's DELETE)
	OpSetRefs   = "set-refs"   // GR Namespace/Name Refs (a client's patch)
	OpUnhold    = "unhold"     // GR Namespace/Name: a client removes the foreign finalizer
	OpAnnotate  = "annotate"   // GR Namespace/Name: a client bumps the resourceVersion
	OpDeliver   = "deliver"    // GR: the next watch event of GR
	OpAdvance   = "advance"    // D: the fake clock, to the next timer or by D
	OpJump      = "jump"       // D: the fake clock by D at once, every timer due by then firing late
	OpExpire    = "expire"     // GR: its watches end with 410
	OpDown      = "down"       // GR Down: LIST and WATCH fail, or heal
	OpFailLists = "fail-lists" // GR N: the collector's next N LISTs fail
	OpHoldList  = "hold-list"  // GR Hold: the collector's LISTs wait before their next page, or go on
	// OpFailStream: GR Fault N: the collector's next streaming list of GR
	// fails with Fault after N objects.
	OpFailStream = "fail-stream"
	OpVersion    = "version" // GR Version: the preferred version
	OpUnserve    = "unserve" // GR: a CRD-like resource deleted (still in discovery)
	OpServe      = "serve"   // GR: served again
	// OpLostAnswers: Rate: the collector's writes that land are answered
	// with a timeout, a 5xx or a broken connection at this rate.
	OpLostAnswers = "lost-answers"
)

// RefSpec is an ownerReference by the owner's coordinates: its resource and
// name (the namespace is the dependent's when the owner's kind is
// namespaced), the apiVersion's version when it is not the preferred one,
// and blockOwnerDeletion.
type RefSpec struct {
	GR      schema.GroupResource
	Name    string
	Version string
	Block   bool
}

func (r RefSpec) String() string {
	s := r.GR.String() + ":" + r.Name
	if r.Version != "" {
		s += "@" + r.Version
	}
	if r.Block {
		s += "!"
	}
	return s
}

// Action is one step of a schedule.
type Action struct {
	Op         string
	GR         schema.GroupResource
	Namespace  string
	Name       string
	Finalizers []string
	Refs       []RefSpec
	Policy     metav1.DeletionPropagation
	D          time.Duration
	N          int
	Rate       float64
	Version    string
	Down       bool
	Hold       bool
	// Stream: a started collector lists by streaming (else by pages only).
	Stream bool
	Fault  StreamFault
}

func (a Action) obj() string {
	if a.Namespace == "" {
		return a.GR.String() + " " + a.Name
	}
	return a.GR.String() + " " + a.Namespace + "/" + a.Name
}

func refsText(refs []RefSpec) string {
	var b []string
	for _, r := range refs {
		b = append(b, r.String())
	}
	return strings.Join(b, ",")
}

// String is the action's line in a schedule's text form (ParseAction reads
// it back).
func (a Action) String() string {
	switch a.Op {
	case OpFaults, OpLostAnswers:
		return fmt.Sprintf("%s %g", a.Op, a.Rate)
	case OpCreate:
		s := a.Op + " " + a.obj()
		if len(a.Finalizers) > 0 {
			s += " fin=" + strings.Join(a.Finalizers, ",")
		}
		if len(a.Refs) > 0 {
			s += " refs=" + refsText(a.Refs)
		}
		return s
	case OpStart, OpRestart:
		if a.Stream {
			return a.Op + " stream"
		}
		return a.Op + " pages"
	case OpDelete:
		p := string(a.Policy)
		if p == "" {
			p = "none"
		}
		return a.Op + " " + a.obj() + " policy=" + p
	case OpSetRefs:
		return a.Op + " " + a.obj() + " refs=" + refsText(a.Refs)
	case OpUnhold, OpAnnotate:
		return a.Op + " " + a.obj()
	case OpDeliver, OpExpire, OpUnserve, OpServe:
		return a.Op + " " + a.GR.String()
	case OpAdvance, OpJump:
		return a.Op + " " + a.D.String()
	case OpDown:
		return fmt.Sprintf("%s %s %v", a.Op, a.GR, a.Down)
	case OpFailLists:
		return fmt.Sprintf("%s %s %d", a.Op, a.GR, a.N)
	case OpHoldList:
		return fmt.Sprintf("%s %s %v", a.Op, a.GR, a.Hold)
	case OpFailStream:
		return fmt.Sprintf("%s %s %s %d", a.Op, a.GR, a.Fault, a.N)
	case OpVersion:
		return a.Op + " " + a.GR.String() + " " + a.Version
	}
	return "unknown " + a.Op
}

// FormatSchedule returns a schedule's text form: the seed, then one action
// a line.
func FormatSchedule(seed uint64, actions []Action) string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d\n", seed)
	for _, a := range actions {
		b.WriteString(a.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// ParseSchedule reads a schedule's text form (FormatSchedule); blank lines
// and text after '#' are ignored, and so is a leading step number.
func ParseSchedule(text string) (seed uint64, actions []Action, err error) {
	sc := bufio.NewScanner(strings.NewReader(text))
	n := 0
	for sc.Scan() {
		n++
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) > 0 {
			if _, err := strconv.Atoi(f[0]); err == nil {
				f = f[1:] // a step number, as a trace shows it
			}
		}
		if len(f) == 0 {
			continue
		}
		if f[0] == "seed" {
			if len(f) != 2 {
				return 0, nil, fmt.Errorf("line %d: want seed N", n)
			}
			if seed, err = strconv.ParseUint(f[1], 10, 64); err != nil {
				return 0, nil, fmt.Errorf("line %d: %w", n, err)
			}
			continue
		}
		a, err := ParseAction(strings.Join(f, " "))
		if err != nil {
			return 0, nil, fmt.Errorf("line %d: %w", n, err)
		}
		actions = append(actions, a)
	}
	return seed, actions, sc.Err()
}

// ParseAction reads one action's line (Action.String).
func ParseAction(line string) (Action, error) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return Action{}, fmt.Errorf("empty action")
	}
	a := Action{Op: f[0]}
	args := f[1:]
	need := func(n int) error {
		if len(args) < n {
			return fmt.Errorf("%q: want %d arguments", line, n)
		}
		return nil
	}
	obj := func() error {
		if err := need(2); err != nil {
			return err
		}
		a.GR = schema.ParseGroupResource(args[0])
		if ns, name, ok := strings.Cut(args[1], "/"); ok {
			a.Namespace, a.Name = ns, name
		} else {
			a.Name = args[1]
		}
		args = args[2:]
		return nil
	}
	opts := func() error {
		for _, kv := range args {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return fmt.Errorf("%q: want key=value, got %q", line, kv)
			}
			switch k {
			case "fin":
				if v != "" {
					a.Finalizers = strings.Split(v, ",")
				}
			case "refs":
				refs, err := parseRefs(v)
				if err != nil {
					return fmt.Errorf("%q: %w", line, err)
				}
				a.Refs = refs
			case "policy":
				if v != "none" {
					a.Policy = metav1.DeletionPropagation(v)
				}
			default:
				return fmt.Errorf("%q: unknown key %q", line, k)
			}
		}
		return nil
	}
	var err error
	switch a.Op {
	case OpFaults, OpLostAnswers:
		if err = need(1); err == nil {
			a.Rate, err = strconv.ParseFloat(args[0], 64)
		}
	case OpCreate, OpDelete, OpSetRefs:
		if err = obj(); err == nil {
			err = opts()
		}
		if err == nil && a.Op == OpSetRefs && a.Refs == nil {
			a.Refs = []RefSpec{}
		}
	case OpUnhold, OpAnnotate:
		err = obj()
	case OpStart, OpRestart:
		// "start" alone (schedules printed before streaming lists): pages.
		if len(args) > 0 {
			switch args[0] {
			case "stream":
				a.Stream = true
			case "pages":
			default:
				err = fmt.Errorf("%q: want stream or pages", line)
			}
		}
	case OpDeliver, OpExpire, OpUnserve, OpServe:
		if err = need(1); err == nil {
			a.GR = schema.ParseGroupResource(args[0])
		}
	case OpAdvance, OpJump:
		if err = need(1); err == nil {
			a.D, err = time.ParseDuration(args[0])
		}
	case OpDown:
		if err = need(2); err == nil {
			a.GR = schema.ParseGroupResource(args[0])
			a.Down, err = strconv.ParseBool(args[1])
		}
	case OpFailLists:
		if err = need(2); err == nil {
			a.GR = schema.ParseGroupResource(args[0])
			a.N, err = strconv.Atoi(args[1])
		}
	case OpHoldList:
		if err = need(2); err == nil {
			a.GR = schema.ParseGroupResource(args[0])
			a.Hold, err = strconv.ParseBool(args[1])
		}
	case OpFailStream:
		if err = need(3); err == nil {
			a.GR, a.Fault = schema.ParseGroupResource(args[0]), StreamFault(args[1])
			if !slices.Contains(StreamFaults, a.Fault) {
				err = fmt.Errorf("%q: unknown stream fault %q", line, a.Fault)
			} else {
				a.N, err = strconv.Atoi(args[2])
			}
		}
	case OpVersion:
		if err = need(2); err == nil {
			a.GR, a.Version = schema.ParseGroupResource(args[0]), args[1]
		}
	default:
		return Action{}, fmt.Errorf("%q: unknown action %q", line, a.Op)
	}
	return a, err
}

func parseRefs(v string) ([]RefSpec, error) {
	if v == "" {
		return nil, nil
	}
	var out []RefSpec
	for _, s := range strings.Split(v, ",") {
		var r RefSpec
		r.Block = strings.HasSuffix(s, "!")
		s = strings.TrimSuffix(s, "!")
		s, r.Version, _ = strings.Cut(s, "@")
		gr, name, ok := strings.Cut(s, ":")
		if !ok || name == "" {
			return nil, fmt.Errorf("reference %q: want resource.group:name[@version][!]", s)
		}
		r.GR, r.Name = schema.ParseGroupResource(gr), name
		out = append(out, r)
	}
	return out, nil
}

// ---- applying actions ----

// key is the coordinates of an action's object.
func (a Action) key() objKey { return objKey{a.GR, a.Namespace, a.Name} }

// handleOf returns the handle of the object an action names, as this
// simulation created it; false when it never created it (a shrunk schedule
// left its creation out).
func (s *Sim) handleOf(k objKey) (Obj, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.names[k]
	return o, ok
}

// resolveRefs turns RefSpecs into ownerReferences to the objects this
// simulation created under those coordinates (gone ones keep the UID they
// had); references to objects it never created are left out, and the
// effective specs returned.
func (s *Sim) resolveRefs(ns string, specs []RefSpec) ([]metav1.OwnerReference, []RefSpec) {
	var refs []metav1.OwnerReference
	var eff []RefSpec
	for _, r := range specs {
		k := s.Srv.KindOf(r.GR)
		if k == nil {
			continue
		}
		ons := ""
		if k.Namespaced {
			ons = ns
		}
		o, ok := s.handleOf(objKey{r.GR, ons, r.Name})
		if !ok {
			continue
		}
		ref := s.OwnerRef(o, r.Block)
		if r.Version != "" {
			ref.APIVersion = schema.GroupVersion{Group: r.GR.Group, Version: r.Version}.String()
		}
		refs = append(refs, ref)
		eff = append(eff, r)
	}
	return refs, eff
}

// refSpecs turns ownerReferences back into RefSpecs (by the owner's kind
// and name); references to kinds the world does not have are left out.
func (s *Sim) refSpecs(refs []metav1.OwnerReference) []RefSpec {
	out := []RefSpec{}
	for _, r := range refs {
		gv, err := schema.ParseGroupVersion(r.APIVersion)
		if err != nil {
			continue
		}
		s.Srv.mu.Lock()
		var gr schema.GroupResource
		var preferred string
		for g, res := range s.Srv.kinds {
			if res.Group == gv.Group && res.Kind.Kind == r.Kind {
				gr, preferred = g, res.Preferred
			}
		}
		s.Srv.mu.Unlock()
		if gr.Resource == "" {
			continue
		}
		spec := RefSpec{GR: gr, Name: r.Name, Block: r.BlockOwnerDeletion != nil && *r.BlockOwnerDeletion}
		if gv.Version != preferred {
			spec.Version = gv.Version
		}
		out = append(out, spec)
	}
	return out
}

// Actions returns the schedule applied so far (Apply), as it took effect:
// actions on objects never created left out, references to them dropped.
func (s *Sim) Actions() []Action {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.actions)
}

func (s *Sim) recordAction(a Action) {
	s.mu.Lock()
	s.actions = append(s.actions, a)
	s.mu.Unlock()
}

// Apply carries out one action and settles. An action on an object this
// simulation never created does nothing (a shrunk schedule left the
// creation out), and references to such objects are dropped; what took
// effect is recorded (Actions).
func (s *Sim) Apply(a Action) error {
	switch a.Op {
	case OpFaults:
		s.Step("faults: collector calls fail at rate %g", a.Rate)
		s.mu.Lock()
		s.FaultRate = a.Rate
		s.mu.Unlock()
	case OpLostAnswers:
		s.Step("faults: the answers to collector writes that landed are lost at rate %g", a.Rate)
		s.mu.Lock()
		s.LostAnswerRate = a.Rate
		s.mu.Unlock()
	case OpCreate:
		refs, eff := s.resolveRefs(a.Namespace, a.Refs)
		a.Refs = eff
		o, err := s.Create(a.GR, a.Namespace, a.Name, a.Finalizers, refs...)
		if err != nil {
			return nil // the resource is not served right now, or the name is taken
		}
		s.mu.Lock()
		s.names[a.key()] = o
		s.mu.Unlock()
	case OpStart:
		s.Streaming = a.Stream
		s.Step("start collector (%s)", s.listsBy())
		if err := s.Start(); err != nil {
			return err
		}
	case OpRestart:
		s.Streaming = a.Stream
		s.Step("restart collector (%s)", s.listsBy())
		if err := s.Restart(); err != nil {
			return err
		}
	case OpDelete, OpSetRefs, OpUnhold, OpAnnotate:
		o, ok := s.handleOf(a.key())
		if !ok {
			return nil
		}
		var err error
		switch a.Op {
		case OpDelete:
			err = s.Delete(o, a.Policy)
		case OpSetRefs:
			refs, eff := s.resolveRefs(a.Namespace, a.Refs)
			a.Refs = eff
			if refs == nil {
				refs = []metav1.OwnerReference{}
			}
			err = s.Patch(o, "set ownerReferences "+refsString(refs), map[string]any{"ownerReferences": refs})
		case OpUnhold:
			m := s.Get(o)
			if m == nil || !slices.Contains(m.Finalizers, Finalizer) {
				return nil
			}
			fins := slices.DeleteFunc(slices.Clone(m.Finalizers), func(f string) bool { return f == Finalizer })
			if fins == nil {
				fins = []string{}
			}
			err = s.Patch(o, "remove foreign finalizer", map[string]any{"finalizers": fins})
		case OpAnnotate:
			err = s.Annotate(o)
		}
		if err != nil {
			return err
		}
	case OpDeliver:
		if err := s.Deliver(a.GR); err != nil {
			return err
		}
	case OpAdvance:
		if err := s.Advance(a.D); err != nil {
			return err
		}
	case OpJump:
		if err := s.Jump(a.D); err != nil {
			return err
		}
	case OpExpire:
		if err := s.Expire(a.GR); err != nil {
			return err
		}
	case OpDown:
		s.SetDown(a.GR, a.Down)
	case OpFailLists:
		s.FailLists(a.GR, a.N)
	case OpHoldList:
		s.HoldLists(a.GR, a.Hold)
	case OpFailStream:
		s.FailStream(a.GR, a.Fault, a.N)
	case OpVersion:
		s.SwitchVersion(a.GR, a.Version)
	case OpUnserve:
		s.Unserve(a.GR, true)
	case OpServe:
		s.Serve(a.GR)
	default:
		return fmt.Errorf("unknown action %q", a.Op)
	}
	s.recordAction(a)
	return s.Settle()
}

// Replay runs a schedule from scratch on a new simulation of seed (the
// seed still decides the fault injection and the order of the final
// deliveries), stopping at the first safety violation, then heals and runs
// to quiescence as a random schedule does, and returns the simulation (for
// its trace and Actions) and the outcome. The collector is stopped.
func Replay(seed uint64, actions []Action, w World) (*Sim, *Outcome) {
	s := newSim(seed, w)
	out := &Outcome{Seed: seed}
	out.Err = func() error {
		for _, a := range actions {
			if err := s.Apply(a); err != nil {
				return err
			}
			if len(s.Violations()) > 0 {
				return nil
			}
		}
		return s.heal()
	}()
	s.finish(out)
	return s, out
}
