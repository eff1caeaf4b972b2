package stripesim_test

import (
	"fmt"

	"github.com/oncepay/oncepay/tools/stripesim"
)

// A test in another package decodes the ledger with AdminClient.Ledger and
// asserts that a payment reached the provider exactly once.
func ExampleLedger_IntentsWithMetadata() {
	l := stripesim.Ledger{
		Objects: []stripesim.LedgerObject{
			{ID: "pi_1", Object: "payment_intent", Status: "succeeded", Metadata: map[string]string{"payment_id": "pay_1"}},
			{ID: "ch_1", Object: "charge", Status: "succeeded", PaymentIntent: "pi_1", Metadata: map[string]string{"payment_id": "pay_1"}},
			{ID: "pi_2", Object: "payment_intent", Status: "succeeded", Metadata: map[string]string{"payment_id": "pay_2"}},
		},
		Keys: []stripesim.KeyStats{{Key: "pay_1-charge", Executions: 1, Replays: 2}},
	}

	intents := l.IntentsWithMetadata("payment_id", "pay_1")
	stats, _ := l.Key("pay_1-charge")
	fmt.Println(len(intents), intents[0].ID, len(l.ChargesFor(intents[0].ID)))
	fmt.Println(stats.Executions, stats.Replays)
	// Output:
	// 1 pi_1 1
	// 1 2
}
