package testport

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

func TestGet_PortsAreFreeDistinctAndOutsideTheEphemeralRange(t *testing.T) {
	seen := map[int]bool{}
	for range 50 {
		p := Get(t)
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		if p < lowest || p >= ephemeralStart() {
			t.Fatalf("port %d is outside [%d, %d)", p, lowest, ephemeralStart())
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d is not free: %v", p, err)
		}
		_ = l.Close()
	}
}

// TestGet_AnotherProcessIsNotGivenAHeldPort runs this test binary again as
// a second process that asks for ports while this one holds some.
func TestGet_AnotherProcessIsNotGivenAHeldPort(t *testing.T) {
	if held := os.Getenv("TESTPORT_HELD"); held != "" {
		for range 200 {
			p := Get(t)
			if strings.Contains(","+held+",", ","+strconv.Itoa(p)+",") {
				t.Fatalf("port %d is held by the other process", p)
			}
		}
		return
	}
	var held []string
	for range 2000 {
		held = append(held, strconv.Itoa(Get(t)))
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestGet_AnotherProcessIsNotGivenAHeldPort$", "-test.count=1")
	cmd.Env = append(os.Environ(), "TESTPORT_HELD="+strings.Join(held, ","))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the second process: %v\n%s", err, out)
	}
}
