package apiserver

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"time"
	_ "time/tzdata" // spec.maintenance's time zones resolve in any image, with or without the system's zoneinfo

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// MaintenanceTime is where now stands in a tenant's maintenance windows.
type MaintenanceTime struct {
	// Open is true while a window is open.
	Open bool
	// Opened is when the open window opened (zero when none is).
	Opened time.Time
	// Closes is when the open window closes (zero when none is open).
	Closes time.Time
	// Next is when the next window opens after now.
	Next time.Time
}

// MaintenanceAt places now in m's weekly windows, in m's time zone. The
// windows follow its daylight saving time: a window opens and closes at
// the same local times whatever the offset (02:00 for 4h closes at 06:00
// local, three or five hours later on the nights the clocks change), and
// one that would open in the hour the clocks skip opens when that hour
// ends.
func MaintenanceAt(m *v1alpha1.MaintenanceSpec, now time.Time) (MaintenanceTime, error) {
	loc, err := time.LoadLocation(cmp.Or(m.TimeZone, "UTC"))
	if err != nil {
		return MaintenanceTime{}, fmt.Errorf("spec.maintenance.timeZone %q: %w", m.TimeZone, err)
	}
	var t MaintenanceTime
	local := now.In(loc)
	// A window opened yesterday may still be open; the next one opens
	// within a week.
	for d := -1; d <= 8; d++ {
		day := time.Date(local.Year(), local.Month(), local.Day()+d, 0, 0, 0, 0, loc)
		for _, w := range m.Windows {
			if len(w.Days) > 0 && !slices.Contains(w.Days, v1alpha1.Weekday(day.Weekday().String())) {
				continue
			}
			h, mi, err := parseClock(w.Start)
			if err != nil {
				return MaintenanceTime{}, err
			}
			start := time.Date(day.Year(), day.Month(), day.Day(), h, mi, 0, 0, loc)
			end := time.Date(day.Year(), day.Month(), day.Day(), h, mi+int(w.Duration.Minutes()), 0, 0, loc)
			switch {
			case !start.After(now) && now.Before(end):
				if !t.Open || start.Before(t.Opened) {
					t.Open, t.Opened = true, start
				}
				if end.After(t.Closes) {
					t.Closes = end
				}
			case start.After(now):
				if t.Next.IsZero() || start.Before(t.Next) {
					t.Next = start
				}
			}
		}
	}
	return t, nil
}

// parseClock reads HH:MM.
func parseClock(s string) (hour, minute int, err error) {
	if len(s) != 5 || s[2] != ':' {
		return 0, 0, fmt.Errorf("maintenance window start %q: want HH:MM", s)
	}
	hour, errH := strconv.Atoi(s[:2])
	minute, errM := strconv.Atoi(s[3:])
	if errH != nil || errM != nil || hour > 23 || minute > 59 || hour < 0 || minute < 0 {
		return 0, 0, fmt.Errorf("maintenance window start %q: want HH:MM", s)
	}
	return hour, minute, nil
}

// validateMaintenance checks what the CRD's rules cannot: the time zone
// is one this operator knows.
func validateMaintenance(m *v1alpha1.MaintenanceSpec, path *field.Path) field.ErrorList {
	if m == nil {
		return nil
	}
	if _, err := time.LoadLocation(cmp.Or(m.TimeZone, "UTC")); err != nil || m.TimeZone == "Local" {
		return field.ErrorList{field.Invalid(path.Child("timeZone"), m.TimeZone, "not a time zone of the IANA database (such as UTC or Europe/Berlin)")}
	}
	var errs field.ErrorList
	for i, w := range m.Windows {
		if _, _, err := parseClock(w.Start); err != nil {
			errs = append(errs, field.Invalid(path.Child("windows").Index(i).Child("start"), w.Start, "want HH:MM on a 24-hour clock"))
		}
		if d := w.Duration.Duration; d < 30*time.Minute || d > 24*time.Hour {
			errs = append(errs, field.Invalid(path.Child("windows").Index(i).Child("duration"), w.Duration.Duration.String(), "must be between 30m and 24h"))
		}
	}
	return errs
}
