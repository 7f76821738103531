// Package sim is sluice's plant simulator: a database server, its workload
// and a migration, in virtual time, so that controllers can be tested and
// tuned deterministically in milliseconds before they touch a server.
// Package lab/sim/fleet scales the plant to a thousand servers with a
// cheaper, fluid model.
//
// # Model
//
// Workload (Slacker §5.1.2, open-loop YCSB). Each store (tenant) receives
// Poisson arrivals at Store.Rate × the scenario's load multiplier (a
// non-homogeneous Poisson process drawn by thinning). A transaction's service
// demand is lognormal with mean Store.Work and coefficient of variation
// Store.WorkCV: its latency on an idle server. At most Store.MPL transactions
// of a store run at once (client threads); later arrivals wait in a FIFO
// queue. Latency = queue wait + service, measured from arrival to completion.
//
// Server. Running transactions progress at a speed (fraction of full speed):
//
//	speed_i = max(0.02, 1 − e_i·u − U_fg(t)) · min(1, C/n)
//
// u is the migration's share of the disk (its read rate over
// Plant.Capacity), e_i the store's exposure to it (Store.Exposure: 1 for the
// store being moved, less for neighbours), and U_fg(t) the disk share of the
// workload's offered I/O, Σ_i rate_i(t)·OpsPerTxn·IOTime: every I/O of a
// transaction waits behind the migration's and the other transactions'
// (a mean-field disk). n is the number of running transactions over all
// stores and C is Plant.Parallelism (beyond C they share it, as in processor
// sharing). The speed is the same for every running transaction of a store,
// so the engine keeps one virtual-work clock per store and a heap of finish
// marks: an exact discrete-event simulation.
//
// So service times stretch as 1/(1 − u − U_fg) as the migration speeds up,
// and a heavier workload shifts the whole curve left; once the disk is
// oversubscribed the MPL queue grows without bound (Slacker Fig. 5–6: a
// convex latency curve with a cliff). A load step therefore moves the cliff
// under a fixed rate (Slacker Fig. 13a), while a controller that gives the
// migration less finds the same slack as before.
//
// Migration. A controller is asked for a Decision every Options.Step (1 s)
// and shown the latency of the last Options.Window (3 s, the proxy's) per
// store, with multiplicative Gaussian measurement noise (Options.Noise, 3%),
// plus the host's I/O figures derived from the load (IOPS, io_ticks,
// throughput and utilisation of the disk) and the migration's progress as
// the agent reports a snapshot's (bytes moved, time left at the rate in
// force). The migration is one copy: there is no catch-up stage. Sends draw
// from a read-ahead buffer and read through to disk when it is empty;
// Decision.Prefetch fills the buffer up to Plant.Buffer. Only disk reads
// cost capacity. Rates are clamped to [0, Plant.MaxRate]. The migration
// moves Plant.Size bytes and completes; the run stops Options.Tail after
// that, or abandons it at Options.MaxDuration.
//
// # Calibration
//
// DefaultPlant and the scenarios are Slacker's testbed scaled to
// milliseconds: a 1 GiB tenant, 440 transactions/s of 2.6 ms demand (CV 0.5:
// ten page accesses each), MPL 40, on a disk the workload keeps 35% busy.
// Idle latency is 4 ms. Fixed rates give 6.3 ms at 4 MB/s, 14.7 ms at 8 MB/s,
// 22 ms at 9 MB/s, 29 ms at 9.5 MB/s and 44 ms at 10 MB/s; from about
// 10.3 MB/s the queue grows without bound, and the unthrottled 12 MB/s takes
// latency to tens of seconds (Slacker: 79 ms idle, 720 ms at 12 MB/s,
// unbounded at 16 MB/s). A 30 ms setpoint uses about 9.5 MB/s and moves the
// tenant in about 113 s; after step40's +40% the same setpoint needs about
// 7 MB/s, and 9.5 MB/s overloads the server.
//
// # Controllers
//
// NewController builds a controller as the agent builds a migration's: the
// PID from a control.Profile (control.DefaultProfile() unless one is named,
// as for `sluice migrate --profile`; its gains were measured on the real
// testbed, not here), the Integral's K from the tune path (Tune: profile,
// local gain fit, K = (1−p)/G; the profile's ladder is refined below the
// first rung over a contract when a tight contract leaves too few rungs to
// fit, and the start rate is never 0 while a rung lies within the
// contracts), and every controller inside a
// control.Governor with the profile's policy: a controller that steers by
// latency holds its initial rate for the profile's settling time after the
// copy's first byte; the catch-up floor never acts, as there is no
// catch-up.
//
// # Determinism
//
// Every random quantity has its own PCG stream seeded from Options.Seed
// (math/rand/v2, never the global source): arrivals and demands per store,
// the burst schedule, measurement noise. A run and its idle twin (the same
// workload without a migration, which gives Result.IdleLatency) see exactly
// the same transactions. No goroutines, no wall clock.
//
// # Measures
//
// Result's latency figures cover transactions that completed while the
// migration ran. ViolationFraction is the share of 1 s windows whose mean
// latency exceeded the contract (Aqueduct's VR); a window where nothing
// completed while transactions waited counts as a violation.
package sim
