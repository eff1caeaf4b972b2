// Command template makes a new service of this clone (see package
// tools/template); `make template NEW=example.com/acme/payments
// DIR=../payments` runs it from the clone's root.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/oncepay/oncepay/tools/template"
)

func main() {
	var o template.Options
	flag.StringVar(&o.Module, "module", "", "the new module path, e.g. example.com/acme/payments (required)")
	flag.StringVar(&o.Dir, "dir", "", "the new service's folder, new or empty (required)")
	flag.StringVar(&o.Name, "name", "", "the new product name in identifiers (default: the module path's last element)")
	flag.StringVar(&o.Source, "source", ".", "the clone to copy")
	flag.Parse()
	o.Out = os.Stdout
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := template.Make(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "template:", err)
		os.Exit(1)
	}
}
