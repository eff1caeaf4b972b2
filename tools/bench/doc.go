// Package bench measures the real oncepay stack (the API, the worker and
// the simulator as separate processes, on a database of their own) against
// pgbench running the same write sets on the same server in the same run,
// and (the peers phase) beside the same job written with DBOS Transact and
// with plain River (tools/bench/peers, a module of its own).
//
// Each comparison alternates the two sides in rounds (oncepay, baseline,
// oncepay, baseline, …) so that a disturbance from elsewhere on the machine
// falls on both, and reports every round and the median of the per-round
// ratios. The ratios, not the absolute numbers, are what carry from one
// machine to another: they say how much of what the database can do the
// service delivers.
package bench
