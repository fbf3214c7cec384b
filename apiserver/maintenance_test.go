package apiserver

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

func TestMaintenanceAt(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	at := func(s string) time.Time {
		v, err := time.ParseInLocation("2006-01-02 15:04", s, berlin)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	window := func(start string, d time.Duration, days ...v1alpha1.Weekday) v1alpha1.MaintenanceWindow {
		return v1alpha1.MaintenanceWindow{Start: start, Duration: metav1.Duration{Duration: d}, Days: days}
	}
	nights := &v1alpha1.MaintenanceSpec{TimeZone: "Europe/Berlin", Windows: []v1alpha1.MaintenanceWindow{window("02:00", 4*time.Hour)}}
	allDay := &v1alpha1.MaintenanceSpec{TimeZone: "Europe/Berlin", Windows: []v1alpha1.MaintenanceWindow{window("00:00", 24*time.Hour)}}
	weekend := &v1alpha1.MaintenanceSpec{TimeZone: "Europe/Berlin", Windows: []v1alpha1.MaintenanceWindow{window("22:00", 6*time.Hour, "Saturday")}}
	for _, tc := range []struct {
		name string
		m    *v1alpha1.MaintenanceSpec
		now  time.Time
		want MaintenanceTime
	}{
		// 2026-11-26 is a Thursday.
		{"before tonight's window", nights, at("2026-11-26 01:59"), MaintenanceTime{Next: at("2026-11-26 02:00")}},
		{"as it opens", nights, at("2026-11-26 02:00"), MaintenanceTime{Open: true, Opened: at("2026-11-26 02:00"), Closes: at("2026-11-26 06:00"), Next: at("2026-11-27 02:00")}},
		{"as it closes", nights, at("2026-11-26 06:00"), MaintenanceTime{Next: at("2026-11-27 02:00")}},
		{"past midnight, in Saturday's window", weekend, at("2026-11-29 03:00"), MaintenanceTime{Open: true, Opened: at("2026-11-28 22:00"), Closes: at("2026-11-29 04:00"), Next: at("2026-12-05 22:00")}},
		{"a week ahead", weekend, at("2026-11-29 04:00"), MaintenanceTime{Next: at("2026-12-05 22:00")}},
		// Clocks go from 02:00 to 03:00 on 2027-03-28: the window opens at
		// 03:00 that night, and closes at 06:00 as on every night.
		{"on the night the clocks skip its start", nights, at("2027-03-28 01:30"), MaintenanceTime{Next: at("2027-03-28 03:00")}},
		{"open that night", nights, at("2027-03-28 05:30"), MaintenanceTime{Open: true, Opened: at("2027-03-28 03:00"), Closes: at("2027-03-28 06:00"), Next: at("2027-03-29 02:00")}},
		{"closed at 06:00 local that night", nights, at("2027-03-28 06:00"), MaintenanceTime{Next: at("2027-03-29 02:00")}},
		// Clocks go from 03:00 back to 02:00 on 2027-10-31: a whole-day
		// window is open the whole 25-hour day.
		{"the long night of a whole-day window", allDay, at("2027-10-31 23:30"), MaintenanceTime{Open: true, Opened: at("2027-10-31 00:00"), Closes: at("2027-11-01 00:00"), Next: at("2027-11-01 00:00")}},
		{"UTC by default", &v1alpha1.MaintenanceSpec{Windows: []v1alpha1.MaintenanceWindow{window("12:00", time.Hour)}},
			time.Date(2026, 11, 26, 12, 30, 0, 0, time.UTC),
			MaintenanceTime{Open: true, Opened: time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC), Closes: time.Date(2026, 11, 26, 13, 0, 0, 0, time.UTC), Next: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := MaintenanceAt(tc.m, tc.now)
			if err != nil {
				t.Fatal(err)
			}
			if got.Open != tc.want.Open || !got.Opened.Equal(tc.want.Opened) || !got.Closes.Equal(tc.want.Closes) || !got.Next.Equal(tc.want.Next) {
				t.Errorf("at %s: got %+v, want %+v", tc.now, got, tc.want)
			}
		})
	}
}

func TestValidate_MaintenanceTimeZone(t *testing.T) {
	for _, tc := range []struct {
		zone string
		ok   bool
	}{{"", true}, {"UTC", true}, {"America/New_York", true}, {"Local", false}, {"Mars/Olympus_Mons", false}} {
		cfg := sample(t, "minimal")
		cfg.Spec.Maintenance = &v1alpha1.MaintenanceSpec{TimeZone: tc.zone, Windows: []v1alpha1.MaintenanceWindow{{Start: "02:00", Duration: metav1.Duration{Duration: time.Hour}}}}
		errs, _ := Validate(cfg)
		if tc.ok != (len(errs) == 0) || (!tc.ok && errs[0].Field != "spec.maintenance.timeZone") {
			t.Errorf("time zone %q: %v", tc.zone, errs)
		}
	}
}
