// Package experiment runs sluice's closed-loop benchmarks on a testbed:
// Slacker's experiments (slack sweep, step in load, multitenant) and the
// live-vs-stop-and-copy downtime comparison. Each experiment is a list of
// trials; a trial is one migration under Slacker's YCSB workload, recorded
// second by second (the workload's latency, the control loop's record) and
// checked row by row against the workload's ledger of acknowledged writes.
// The soak (soak*.go) is the long one: a tenant moved back and forth for an
// hour, the agents' and the proxy's memory and file descriptors watched.
//
// The PID trials run the product's control loop as `sluice migrate
// --setpoint` does: a control.Profile (Common.Profile, default
// control.DefaultProfile) sent with the migration request, the proxy's
// latency windows as the loop's signal. An experiment compares other loops
// by Variants: the same trials again with some of the profile's fields, the
// latency source or the migration's mechanism changed. The workload's load
// over a migration is a Schedule (a step, a swing).
//
// Files: common.go (options every experiment shares), variant.go (the loops
// compared), schedule.go (the load during a migration), trial.go and
// result.go (one migration and what it recorded), baseline.go, the
// experiments (sweep*.go, order.go, ladder.go, step*.go, multitenant.go,
// downtime*.go, soak*.go, wan*.go: a move between hosts on a shaped, delayed
// path, lab/netns), router*.go (the keyspace router against direct
// and tenant routing: no migration, the caller's servers and proxy), and
// report.go (the output files).
package experiment
