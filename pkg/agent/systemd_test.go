package agent

import (
	"strings"
	"testing"
)

func TestSystemdUnit(t *testing.T) {
	u, err := SystemdUnit(UnitOptions{Binary: "/usr/local/bin/steward", Dir: "/var/lib/steward agent", Args: []string{"--binary-store", "/opt/etcd"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"\nRestart=always\n", "\nUser=root\n", "\nKillMode=process\n", "\nType=simple\n",
		`ExecStart=/usr/local/bin/steward agent --dir "/var/lib/steward agent" --binary-store /opt/etcd` + "\n",
		"WantedBy=multi-user.target",
	} {
		if !strings.Contains(u, want) {
			t.Errorf("unit lacks %q:\n%s", want, u)
		}
	}
	if _, err := SystemdUnit(UnitOptions{Binary: "steward", Dir: "/x"}); err == nil {
		t.Error("a relative binary path accepted")
	}
	if got := quote(`a"b$c`); got != `"a\"b$$c"` {
		t.Errorf("quote: %s", got)
	}
}
