package main

import (
	"errors"
	"fmt"
	"strings"
)

// command is one invocation of the binary, parsed before anything reads
// the configuration or connects, so that help never needs a database.
type command struct {
	// name is "serve", "migrate", "tenants create", "tenants ensure" or
	// "help".
	name string
	// tenant is the tenant name of the tenants commands.
	tenant string
	// help is the text printed by "help".
	help string
}

const usage = `usage:
  api [serve]                serve HTTP on LISTEN_ADDR
  api migrate                apply all migrations (River's and oncepay's) and exit
  api tenants create NAME    create a tenant and print its API key once, as JSON
  api tenants ensure NAME    create the tenant if it does not exist, then issue a
                             new API key and print it (existing keys stay valid)

Every command reads its configuration from the environment (see the README);
add --help to a command for its own help.`

// commandHelp is the help of one command, or "" for an unknown one.
func commandHelp(name string) string {
	switch name {
	case "serve":
		return `usage: api [serve]

Serves the HTTP API on LISTEN_ADDR until SIGINT or SIGTERM, then drains
in-flight requests for up to SHUTDOWN_TIMEOUT.`
	case "migrate":
		return `usage: api migrate

Applies River's and oncepay's migrations to DATABASE_URL and exits. Safe to run
again: a database that is up to date is left as it is.`
	case "tenants create":
		return `usage: api tenants create NAME

Creates a tenant named NAME (1 to 200 characters, unique) with one API key, and
prints {"tenant_id": ..., "api_key": ...} as JSON. The key is shown only this
once: only its hash is stored. Fails if a tenant with that name exists.`
	case "tenants ensure":
		return `usage: api tenants ensure NAME

Creates the tenant NAME if it does not exist, then issues a new API key for it
and prints {"tenant_id": ..., "api_key": ...} as JSON. Keys issued before stay
valid. Meant for scripts and one-shot setup steps that may run more than once.`
	}
	return ""
}

// parseCommand reads args (the program name first).
func parseCommand(args []string) (command, error) {
	words := args[1:]
	for _, w := range words {
		if w == "-h" || w == "-help" || w == "--help" {
			text := commandHelp(strings.Join(positional(words), " "))
			if text == "" {
				text = usage
			}
			return command{name: "help", help: text}, nil
		}
		if strings.HasPrefix(w, "-") {
			return command{}, fmt.Errorf("unknown flag %s\n%s", w, usage)
		}
	}
	switch {
	case len(words) == 0 || len(words) == 1 && words[0] == "serve":
		return command{name: "serve"}, nil
	case len(words) == 1 && words[0] == "help":
		return command{name: "help", help: usage}, nil
	case len(words) == 1 && words[0] == "migrate":
		return command{name: "migrate"}, nil
	case len(words) >= 2 && words[0] == "tenants" && (words[1] == "create" || words[1] == "ensure"):
		name := words[0] + " " + words[1]
		if len(words) != 3 {
			return command{}, errors.New("missing tenant name\n" + commandHelp(name))
		}
		return command{name: name, tenant: words[2]}, nil
	default:
		return command{}, fmt.Errorf("unknown command %q\n%s", strings.Join(words, " "), usage)
	}
}

// positional drops the flags from words, leaving the command's name and
// arguments ("tenants create --help" is help for "tenants create").
func positional(words []string) []string {
	var out []string
	for _, w := range words {
		if !strings.HasPrefix(w, "-") {
			out = append(out, w)
		}
	}
	if len(out) > 2 && out[0] == "tenants" {
		out = out[:2]
	}
	return out
}
