// Package flagrange gives kingpin's numeric flags the range they take. A
// value outside it is refused while the command line is parsed, with an
// error that names the flag and the range, before anything starts: a
// 1 ns sampling period, a negative line count or a budget of -1 are
// typing errors, not requests.
package flagrange

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/alecthomas/units"
)

// Bounded is what every ranged flag's value is: its bounds, as the flag
// is written (the test that every numeric flag has one reads them).
type Bounded interface {
	kingpin.Value
	Bounds() (min, max string)
}

// value is one ranged flag: parse reads the text, and the result must lie
// within [min, max] by less.
type value[T any] struct {
	flag     string
	p        *T
	min, max T
	parse    func(string) (T, error)
	format   func(T) string
	less     func(a, b T) bool
}

func (v *value[T]) Set(s string) error {
	n, err := v.parse(s)
	if err != nil {
		return fmt.Errorf("--%s=%s: %w", v.flag, s, err)
	}
	if v.less(n, v.min) || v.less(v.max, n) {
		lo, hi := v.Bounds()
		return fmt.Errorf("--%s=%s: outside the range it takes, [%s, %s]", v.flag, s, lo, hi)
	}
	*v.p = n
	return nil
}

func (v *value[T]) String() string { return v.format(*v.p) }

func (v *value[T]) Bounds() (string, string) { return v.format(v.min), v.format(v.max) }

// bind sets fc's default and value.
func bind[T any](fc *kingpin.FlagClause, def string, v *value[T]) {
	v.flag = fc.Model().Name
	if def != "" {
		fc.Default(def)
	}
	fc.SetValue(v)
}

func less[T int | uint64 | float64 | time.Duration | units.Base2Bytes](a, b T) bool { return a < b }

// Int binds fc to p, taking integers in [min, max].
func Int(fc *kingpin.FlagClause, p *int, def string, min, max int) {
	bind(fc, def, &value[int]{p: p, min: min, max: max, less: less[int], format: strconv.Itoa,
		parse: func(s string) (int, error) { n, err := strconv.ParseInt(s, 0, 64); return int(n), numErr(err) }})
}

// Uint64 binds fc to p, taking integers in [min, max].
func Uint64(fc *kingpin.FlagClause, p *uint64, def string, min, max uint64) {
	bind(fc, def, &value[uint64]{p: p, min: min, max: max, less: less[uint64],
		format: func(n uint64) string { return strconv.FormatUint(n, 10) },
		parse:  func(s string) (uint64, error) { n, err := strconv.ParseUint(s, 0, 64); return n, numErr(err) }})
}

// Float64 binds fc to p, taking numbers in [min, max].
func Float64(fc *kingpin.FlagClause, p *float64, def string, min, max float64) {
	bind(fc, def, &value[float64]{p: p, min: min, max: max, less: less[float64],
		format: func(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) },
		parse: func(s string) (float64, error) {
			f, err := strconv.ParseFloat(s, 64)
			if err == nil && f != f {
				err = errors.New("NaN lies in no range")
			}
			return f, numErr(err)
		}})
}

// Duration binds fc to p, taking Go durations in [min, max].
func Duration(fc *kingpin.FlagClause, p *time.Duration, def string, min, max time.Duration) {
	bind(fc, def, &value[time.Duration]{p: p, min: min, max: max, less: less[time.Duration],
		format: time.Duration.String, parse: time.ParseDuration})
}

// Bytes binds fc to p, taking sizes (32MiB) in [min, max].
func Bytes(fc *kingpin.FlagClause, p *units.Base2Bytes, def string, min, max units.Base2Bytes) {
	bind(fc, def, &value[units.Base2Bytes]{p: p, min: min, max: max, less: less[units.Base2Bytes],
		format: units.Base2Bytes.String, parse: units.ParseBase2Bytes})
}

// numErr says what strconv's errors mean here.
func numErr(err error) error {
	if ne, ok := err.(*strconv.NumError); ok {
		return fmt.Errorf("not a number in range (%v)", ne.Err)
	}
	return err
}
