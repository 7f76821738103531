package cli

import (
	"fmt"
	"os"
	"strings"

	"github.com/sluicedb/sluice/control"
)

// Profile resolves a --profile argument: the built-in profile of that name
// (control.Profiles), else the YAML or JSON profile file at that path
// (control.LoadProfile). The error is one line naming the argument and the
// problem; callers report it as a UsageError.
func Profile(arg string) (control.Profile, error) {
	if p, err := control.ProfileNamed(arg); err == nil {
		return p, nil
	}
	fh, err := os.Open(arg)
	if err != nil {
		return control.Profile{}, fmt.Errorf("%q is neither a profile (%s) nor a readable file: %v", arg, strings.Join(control.Profiles(), ", "), err)
	}
	defer fh.Close()
	p, err := control.LoadProfile(fh)
	if err != nil {
		return control.Profile{}, fmt.Errorf("%s: %v", arg, strings.TrimPrefix(err.Error(), "control: "))
	}
	return p, nil
}
