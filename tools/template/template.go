// Package template makes a new service of a local clone of this one: it
// copies the files git tracks into a new folder, renames the module and
// every place the product name is an identifier (database, metric prefix,
// provider key prefix, image and container names, environment variables,
// OpenAPI title, help texts), and commits the result as the first commit
// of a new repository. Nothing is fetched: the module is not published, so
// the clone is the source.
package template

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

// Product is this project's name as it appears in identifiers, and Module
// its module path: the two things a new service renames.
const (
	Product = "oncepay"
	Module  = "github.com/oncepay/oncepay"
)

// left are the tracked files that describe this project's own history, not
// the new service's: its measured bench runs.
var left = regexp.MustCompile(`^tools/bench/results/.*\.json$`)

// Options says what to make.
type Options struct {
	// Source is the root of the clone to copy. Required.
	Source string
	// Dir is the new service's folder; it must not exist, or be empty.
	// Required.
	Dir string
	// Module is the new module path, e.g. example.com/acme/payments.
	// Required.
	Module string
	// Name is the new product name, used wherever "oncepay" is an
	// identifier: lowercase letters and digits, starting with a letter.
	// Defaults to the module path's last element, if that is one.
	Name string
	// Out receives what was done and the next commands.
	Out io.Writer
}

var (
	validName = regexp.MustCompile(`^[a-z][a-z0-9]{1,30}$`)
	// validModule is a module path's shape: slash-separated elements of
	// letters, digits and ._~- (go help importpath).
	validModule = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._~-]*(/[A-Za-z0-9._~-]+)*$`)
)

// withDefaults validates o and fills Name.
func (o Options) withDefaults() (Options, error) {
	var errs []error
	if o.Source == "" {
		errs = append(errs, errors.New("the source clone is required"))
	}
	if o.Dir == "" {
		errs = append(errs, errors.New("DIR, the new service's folder, is required"))
	}
	if !validModule.MatchString(o.Module) || strings.Contains(o.Module, "..") {
		errs = append(errs, fmt.Errorf("NEW=%q is not a module path (e.g. example.com/acme/payments)", o.Module))
	}
	if o.Name == "" {
		o.Name = path.Base(o.Module)
	}
	if !validName.MatchString(o.Name) {
		errs = append(errs, fmt.Errorf("the product name %q must be 2 to 31 lowercase letters and digits, starting with a letter (it names the database, "+
			"the metrics and the environment variables); set NAME=", o.Name))
	}
	if o.Name == Product {
		errs = append(errs, fmt.Errorf("the product name must not stay %q", Product))
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	return o, errors.Join(errs...)
}

// Make copies o.Source into o.Dir as a new service and commits it.
func Make(ctx context.Context, o Options) error {
	o, err := o.withDefaults()
	if err != nil {
		return err
	}
	if entries, err := os.ReadDir(o.Dir); err == nil && len(entries) > 0 {
		return fmt.Errorf("%s is not empty: choose a new folder", o.Dir)
	}
	files, err := trackedFiles(ctx, o.Source)
	if err != nil {
		return err
	}
	rename := renamer(o.Module, o.Name)
	copied := 0
	for _, name := range files {
		if left.MatchString(name) {
			continue
		}
		src := filepath.Join(o.Source, filepath.FromSlash(name))
		info, err := os.Lstat(src)
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the work tree, not yet in git
		}
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return fmt.Errorf("%s: only regular files are copied", name)
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if !bytes.Contains(data, []byte{0}) { // text
			data = []byte(rename(string(data)))
		}
		switch name {
		case "README.md":
			data = append(data, []byte(attribution(o.Name))...)
		}
		dst := filepath.Join(o.Dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(dst, data, info.Mode().Perm()); err != nil {
			return err
		}
		copied++
	}
	fmt.Fprintf(o.Out, "copied %d files into %s as module %s, product %s\n", copied, o.Dir, o.Module, o.Name)
	if err := commit(ctx, o.Dir, o.Name); err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "\nnext:\n  cd %s && make run    # the simulator, the worker and the API\n  make test             # every test, against a real PostgreSQL\n", o.Dir)
	return nil
}

// APIKeyPrefix starts every API key of the product ("opk_<id>_<secret>"),
// so that a leaked key is recognised as its; a template's keys start with
// its own (KeyPrefix).
const APIKeyPrefix = "opk_"

// KeyPrefix is the API key prefix of a product named name: its first two
// characters and "k_" ("acmepay" makes "ack_…" keys).
func KeyPrefix(name string) string { return name[:2] + "k_" }

// renamer returns the rewrite of a text file: the module path first (it
// holds the product name), the API key prefix, then the product name in
// each of its cases: oncepay, Oncepay (alert names) and ONCEPAY
// (environment variables).
func renamer(module, name string) func(string) string {
	r := strings.NewReplacer(
		Module, module,
		APIKeyPrefix, KeyPrefix(name),
		strings.ToUpper(Product), strings.ToUpper(name),
		strings.ToUpper(Product[:1])+Product[1:], strings.ToUpper(name[:1])+name[1:],
		Product, name,
	)
	return r.Replace
}

// attribution is the one line of the new README that names where it
// came from, with the copyright notice the MIT licence asks to keep.
func attribution(name string) string {
	return fmt.Sprintf("\n---\n%s was made from the %s template (Copyright (c) 2026 The %s authors, MIT License).\n", name, Product, Product)
}

// trackedFiles lists the files git tracks in the clone at root.
func trackedFiles(ctx context.Context, root string) ([]string, error) {
	out, err := exec.CommandContext(ctx, "git", "-C", root, "ls-files", "-z", "--cached").Output()
	if err != nil {
		return nil, fmt.Errorf("list the tracked files of %s (a git clone is needed): %w", root, err)
	}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f != "" {
			files = append(files, f)
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s tracks no files", root)
	}
	return files, nil
}

// commit makes dir a git repository with one commit of everything in it.
// The author is the user's git identity, or a stand-in when none is set.
func commit(ctx context.Context, dir, name string) error {
	git := func(args ...string) error {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME="+cmpEnv("GIT_AUTHOR_NAME", name+" authors"),
			"GIT_COMMITTER_NAME="+cmpEnv("GIT_COMMITTER_NAME", name+" authors"))
		if email, _ := exec.CommandContext(ctx, "git", "config", "user.email").Output(); len(bytes.TrimSpace(email)) == 0 {
			cmd.Env = append(cmd.Env, "GIT_AUTHOR_EMAIL="+cmpEnv("GIT_AUTHOR_EMAIL", name+"@localhost"),
				"GIT_COMMITTER_EMAIL="+cmpEnv("GIT_COMMITTER_EMAIL", name+"@localhost"))
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %s in %s: %w\n%s", strings.Join(args, " "), dir, err, out)
		}
		return nil
	}
	if err := git("init", "-q"); err != nil {
		return err
	}
	if err := git("add", "-A"); err != nil {
		return err
	}
	return git("commit", "-q", "-m", "Start "+name+" from a template")
}

// cmpEnv is the variable's value, or def when it is unset or empty.
func cmpEnv(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
