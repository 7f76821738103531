// Package units parses and formats the byte sizes, byte rates and durations
// that sluice's commands take and print. Sizes use decimal SI prefixes
// (kB = 1000) and binary IEC ones (KiB = 1024) as written; a bare number is bytes.
package units

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
)

var multipliers = map[string]float64{
	"": 1, "b": 1,
	"k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
}

// ParseBytes parses a size such as "200MB", "1.5GiB", "64k" or "4096" into
// bytes. Negative, NaN and infinite values are errors.
func ParseBytes(s string) (int64, error) {
	v, err := parseScaled(s, "")
	if err != nil {
		return 0, fmt.Errorf("invalid size %q: %w", s, err)
	}
	if v > math.MaxInt64 {
		return 0, fmt.Errorf("invalid size %q: too large", s)
	}
	return int64(v), nil
}

// ParseRate parses a byte rate such as "20MB/s", "20MB", "1.5GiB/s", "0" or
// "unlimited"/"inf" (math.Inf(1)) into bytes per second. Negative values are errors.
func ParseRate(s string) (float64, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "inf", "unlimited", "max":
		return math.Inf(1), nil
	}
	v, err := parseScaled(s, "/s")
	if err != nil {
		return 0, fmt.Errorf("invalid rate %q: %w", s, err)
	}
	return v, nil
}

func parseScaled(s, suffix string) (float64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if suffix != "" {
		t = strings.TrimSuffix(t, suffix)
		t = strings.TrimSuffix(t, "ps")
	}
	i := strings.IndexFunc(t, func(r rune) bool { return unicode.IsLetter(r) })
	num, unit := t, ""
	if i >= 0 {
		num, unit = strings.TrimSpace(t[:i]), t[i:]
	}
	m, ok := multipliers[unit]
	if !ok {
		return 0, fmt.Errorf("unknown unit %q", unit)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("not a number")
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("not a finite number")
	}
	if v < 0 {
		return 0, fmt.Errorf("must not be negative")
	}
	return v * m, nil
}

// FormatBytes renders n bytes with a decimal prefix, e.g. "212.4 MB".
func FormatBytes(n float64) string {
	switch a := math.Abs(n); {
	case a >= 1e12:
		return fmt.Sprintf("%.2f TB", n/1e12)
	case a >= 1e9:
		return fmt.Sprintf("%.2f GB", n/1e9)
	case a >= 1e6:
		return fmt.Sprintf("%.1f MB", n/1e6)
	case a >= 1e3:
		return fmt.Sprintf("%.1f kB", n/1e3)
	}
	return fmt.Sprintf("%.0f B", n)
}

// FormatRate renders bytes/s, e.g. "35.0 MB/s"; +Inf is "unlimited".
func FormatRate(r float64) string {
	if math.IsInf(r, 1) {
		return "unlimited"
	}
	return FormatBytes(r) + "/s"
}
