package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/oncepay/oncepay/internal/tenant"
	"github.com/oncepay/oncepay/tools/devstack"
)

// keptFile is where a local stack keeps what it printed, between its
// starts. It holds the API key: the file is the user's alone.
const keptFile = ".run/local.json"

// envFile is the stack's export line as a file a shell sources (". .run/env"),
// so that the README's tour, pasted as written, reaches this stack's API
// with its key, on whatever port it listens. It holds the key: the user's
// alone.
const envFile = ".run/env"

// kept is what a local stack keeps from one start to the next, so that
// what it printed (the exported key, the curl, the operator's export line)
// stays true after a restart, as the data does: the key it printed, with
// the database it was made in, and the ports PORTS=auto picked. It lasts
// until the database is dropped (make clean-db) or the file is removed.
type kept struct {
	path        string
	DatabaseURL string `json:"database_url,omitempty"`
	TenantID    string `json:"tenant_id,omitempty"`
	APIKey      string `json:"api_key,omitempty"`
	// Addrs are the addresses PORTS=auto picked: the API's, the worker's
	// admin, the API's metrics and the simulator's.
	Addrs []string `json:"addrs,omitempty"`
}

func loadKept(path string) kept {
	k := kept{path: path}
	if b, err := os.ReadFile(path); err == nil {
		_ = json.Unmarshal(b, &k) // unreadable: nothing kept
	}
	return k
}

func (k kept) save() error {
	b, err := json.MarshalIndent(k, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(k.path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(k.path, append(b, '\n'), 0o600)
}

// keptAddrs are the addresses PORTS=auto picked at the last start, if
// every one is free again; nil otherwise.
func (k kept) keptAddrs(n int) []string {
	if len(k.Addrs) != n {
		return nil
	}
	for _, addr := range k.Addrs {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil
		}
		ln.Close()
	}
	return k.Addrs
}

// keptKey is the key printed at the last start, if it was made in this
// stack's database and the API takes it now.
func (k kept) keptKey(ctx context.Context, s *devstack.Stack) (tenant.Created, bool) {
	if k.APIKey == "" || k.DatabaseURL != s.DatabaseURL {
		return tenant.Created{}, false
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.APIURL+"/v1/payments?limit=1", nil)
	if err != nil {
		return tenant.Created{}, false
	}
	req.Header.Set("Authorization", "Bearer "+k.APIKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return tenant.Created{}, false
	}
	resp.Body.Close()
	return tenant.Created{TenantID: k.TenantID, APIKey: k.APIKey}, resp.StatusCode == http.StatusOK
}

// stackKey is the API key a started stack prints: the one it printed
// before when it still works, so nothing printed goes stale; otherwise a
// new one, every other key of the tenant ended, kept for the next start.
func stackKey(ctx context.Context, s *devstack.Stack, path string) (key tenant.Created, again bool, err error) {
	k := loadKept(path)
	if key, ok := k.keptKey(ctx, s); ok {
		return key, true, nil
	}
	if key, err = s.OnlyKey(localTenant); err != nil {
		return tenant.Created{}, false, err
	}
	k.DatabaseURL, k.TenantID, k.APIKey = s.DatabaseURL, key.TenantID, key.APIKey
	return key, false, k.save()
}
