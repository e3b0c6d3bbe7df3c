package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
)

// Firewall cuts traffic between the harness's nodes with nftables rules in
// a table of its own (inet ringlimit_chaos_<pid>). Each node has its own
// loopback address and runs as its own user, so a rule can tell the
// isolated node's packets from the others' (its outgoing TCP connections
// leave from 127.0.0.1, so the address alone cannot) while the harness's
// clients (another user) still reach every node. Heal deletes the table,
// which removes every rule; nothing outside 127.0.0.0/8 and the harness's
// users is touched.
type Firewall struct {
	table string
	on    bool
}

// NewFirewall checks that nft can be used (root, nft installed) and removes
// tables left by chaos runs whose process is gone.
func NewFirewall(ctx context.Context) (*Firewall, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("chaos: partitions need root (nftables rules on lo and nodes run as their own users)")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		return nil, fmt.Errorf("chaos: partitions need nft (apt-get install -y nftables): %w", err)
	}
	fw := &Firewall{table: "ringlimit_chaos_" + strconv.Itoa(os.Getpid())}
	out, err := exec.CommandContext(ctx, "nft", "list", "tables").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("chaos: nft list tables: %w: %s", err, out)
	}
	for _, m := range regexp.MustCompile(`table inet (ringlimit_chaos_(\d+))`).FindAllStringSubmatch(string(out), -1) {
		pid, _ := strconv.Atoi(m[2])
		if pid == os.Getpid() || syscall.Kill(pid, 0) != nil {
			_ = nft(ctx, "delete table inet "+m[1])
		}
	}
	return fw, nil
}

// Isolate drops every packet between node x and the others, both ways
// (gossip UDP and TCP, gRPC), leaving the harness's own traffic alone.
func (fw *Firewall) Isolate(ctx context.Context, x *Proc, others []*Proc) error {
	if x.UID < 0 {
		return errors.New("chaos: isolate needs nodes running as their own users")
	}
	var addrs, uids []string
	for _, o := range others {
		if o != x {
			addrs = append(addrs, o.Host)
			uids = append(uids, strconv.Itoa(o.UID))
		}
	}
	if len(addrs) == 0 {
		return errors.New("chaos: isolate: no other nodes")
	}
	script := fmt.Sprintf(`table inet %[1]s {
	chain out {
		type filter hook output priority 0; policy accept;
		meta skuid %[2]d ip daddr { %[3]s } drop
		meta skuid { %[4]s } ip daddr %[5]s drop
	}
}
`, fw.table, x.UID, strings.Join(addrs, ", "), strings.Join(uids, ", "), x.Host)
	cmd := exec.CommandContext(ctx, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("chaos: nft -f: %w: %s\n%s", err, out, script)
	}
	fw.on = true
	return nil
}

// Heal removes every rule (the whole table). It is safe to call twice.
func (fw *Firewall) Heal(ctx context.Context) error {
	if !fw.on {
		return nil
	}
	if err := nft(ctx, "delete table inet "+fw.table); err != nil {
		return err
	}
	fw.on = false
	return nil
}

// Rules lists the table's rules ("" when healed), for logs.
func (fw *Firewall) Rules(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "nft", "list", "table", "inet", fw.table).CombinedOutput()
	if err != nil {
		return ""
	}
	return string(out)
}

func nft(ctx context.Context, cmd string) error {
	c := exec.CommandContext(ctx, "nft", strings.Fields(cmd)...)
	var b bytes.Buffer
	c.Stdout, c.Stderr = &b, &b
	if err := c.Run(); err != nil {
		return fmt.Errorf("chaos: nft %s: %w: %s", cmd, err, b.String())
	}
	return nil
}
