package experiment

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	agentclient "github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/control"
	"github.com/sluicedb/sluice/snapshot"
)

// Variant is a PID loop as an experiment runs it: the profile it steers
// with, what it steers by, and the migration's mechanism. The base loop of
// every experiment is Variant{Profile: Common.Profile}: the proxy's
// windows and the agent's defaults, what `sluice migrate --setpoint` runs.
// A variant is written as a list of key=value (ParseVariant).
type Variant struct {
	// Profile is the loop's tuning.
	Profile control.Profile
	// ClientLatency has the loop steer by the workload's own latency
	// window (queue + execution, Slacker's measure) next to the proxy's
	// (Trial.ClientLatency); false: the proxy's windows only, as in the
	// product. Key latency=client|proxy.
	ClientLatency bool
	// WALRelay and Checkpoint are the migration's
	// (agent/client.StartMigration); "" = the agent's defaults. Keys
	// wal_relay=target|source and checkpoint=fast|spread|3s.
	WALRelay, Checkpoint string
}

// The keys of a variant that are not profile fields.
const (
	keyLatency    = "latency"
	keyWALRelay   = "wal_relay"
	keyCheckpoint = "checkpoint"
)

// ParseVariant reads a variant of base: a comma-separated list of
// key=value, each key a field of the profile as a profile file names it
// (ki=0.04, mean_horizon=0, catch_up.boost=2) or one of latency, wal_relay
// and checkpoint. An error names the key at fault.
func ParseVariant(base control.Profile, spec string) (Variant, error) {
	v := Variant{Profile: base}
	seen := map[string]bool{}
	for _, kv := range strings.Split(spec, ",") {
		k, val, ok := strings.Cut(kv, "=")
		k, val = strings.TrimSpace(k), strings.TrimSpace(val)
		switch {
		case !ok || k == "" || val == "":
			return v, fmt.Errorf("%q: want key=value, such as ki=0.04", strings.TrimSpace(kv))
		case seen[k]:
			return v, fmt.Errorf("%s given twice", k)
		}
		seen[k] = true
		if err := v.set(k, val); err != nil {
			return v, err
		}
	}
	if err := v.Profile.Validate(); err != nil {
		return v, fmt.Errorf("%s", strings.TrimPrefix(err.Error(), "control: "))
	}
	return v, nil
}

// set sets key k of v to val.
func (v *Variant) set(k, val string) error {
	switch k {
	case keyLatency:
		if val != "client" && val != "proxy" {
			return fmt.Errorf("%s=%s: want client or proxy", k, val)
		}
		v.ClientLatency = val == "client"
	case keyWALRelay:
		if val != agentclient.WALRelayTarget && val != agentclient.WALRelaySource {
			return fmt.Errorf("%s=%s: want %s or %s", k, val, agentclient.WALRelayTarget, agentclient.WALRelaySource)
		}
		v.WALRelay = val
	case keyCheckpoint:
		if _, _, err := snapshot.ParseCheckpoint(val); err != nil {
			return fmt.Errorf("%s=%s: %v", k, val, err)
		}
		v.Checkpoint = val
	case "name":
		return fmt.Errorf("name: a variant changes fields of the experiment's profile, not its base")
	default:
		return setProfileField(&v.Profile, k, val)
	}
	return nil
}

// setProfileField sets the field of p that a profile file names key (a
// dotted path into a nested field) to val.
func setProfileField(p *control.Profile, key, val string) error {
	rv := reflect.ValueOf(p).Elem()
	path := strings.Split(key, ".")
	for i, name := range path {
		f, ok := fieldTagged(rv, name)
		switch {
		case !ok || name == "name" || (i < len(path)-1 && f.Kind() != reflect.Struct):
			return fmt.Errorf("unknown key %s (want one of %s)", key, strings.Join(VariantKeys(), ", "))
		case i < len(path)-1:
			rv = f
			continue
		case f.Kind() == reflect.Struct:
			return fmt.Errorf("%s: name one of its fields (%s.…)", key, key)
		}
		if err := setScalar(f, val); err != nil {
			return fmt.Errorf("%s=%s: want a value of type %s", key, val, f.Type())
		}
	}
	return nil
}

// setScalar sets f, a number or a boolean, to val.
func setScalar(f reflect.Value, val string) error {
	switch f.Kind() {
	case reflect.Float64:
		x, err := strconv.ParseFloat(val, 64)
		if err == nil {
			f.SetFloat(x)
		}
		return err
	case reflect.Int:
		x, err := strconv.Atoi(val)
		if err == nil {
			f.SetInt(int64(x))
		}
		return err
	case reflect.Bool:
		x, err := strconv.ParseBool(val)
		if err == nil {
			f.SetBool(x)
		}
		return err
	}
	return fmt.Errorf("experiment: a profile field of kind %s", f.Kind())
}

// fieldTagged is the field of struct rv whose YAML name is name.
func fieldTagged(rv reflect.Value, name string) (reflect.Value, bool) {
	t := rv.Type()
	for i := range t.NumField() {
		if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); tag == name {
			return rv.Field(i), true
		}
	}
	return reflect.Value{}, false
}

// VariantKeys lists the keys a variant takes: the profile's fields (nested
// ones dotted) and the variant's own.
func VariantKeys() []string {
	var keys []string
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := range t.NumField() {
			tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
			switch {
			case tag == "" || tag == "-" || tag == "name":
			case t.Field(i).Type.Kind() == reflect.Struct:
				walk(t.Field(i).Type, prefix+tag+".")
			default:
				keys = append(keys, prefix+tag)
			}
		}
	}
	walk(reflect.TypeOf(control.Profile{}), "")
	return append(keys, keyLatency, keyWALRelay, keyCheckpoint)
}

// Label names the loop in trial names and reports: the profile's label
// (control.Profile.Label) with the variant's own settings among its
// changes, such as "sluice", "sluice(ki=0.04)" or
// "sluice(mean_horizon=0,latency=client)".
func (v Variant) Label() string {
	ch := v.Profile.Changes()
	if v.ClientLatency {
		ch = append(ch, keyLatency+"=client")
	}
	if v.WALRelay != "" {
		ch = append(ch, keyWALRelay+"="+v.WALRelay)
	}
	if v.Checkpoint != "" {
		ch = append(ch, keyCheckpoint+"="+v.Checkpoint)
	}
	if len(ch) == 0 {
		return v.Profile.Name
	}
	return v.Profile.Name + "(" + strings.Join(ch, ",") + ")"
}

// LatencySource names what the loop steers by: "client" (the workload's
// own window too) or "proxy".
func (v Variant) LatencySource() string {
	if v.ClientLatency {
		return "client"
	}
	return "proxy"
}

// request is a migration request at a fixed rate (bytes/s; 0 = unlimited)
// with v's mechanism.
func (v Variant) request(rate float64) agentclient.StartMigration {
	return agentclient.StartMigration{Rate: rate, WALRelay: v.WALRelay, Checkpoint: v.Checkpoint}
}

// control is the control spec of v at setpoint sp (ms) and top speed
// maxRate (bytes/s), as `sluice migrate --setpoint` sends it.
func (v Variant) control(sp, maxRate float64) *agentclient.Control {
	prof, err := json.Marshal(v.Profile)
	if err != nil { // a Profile is plain numbers and strings
		panic(err)
	}
	return &agentclient.Control{Controller: "pid", SetpointMs: sp, MaxRate: maxRate, Profile: prof}
}
