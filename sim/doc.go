// Package sim is sluice's plant simulator: a database server, its workload
// and a migration, in virtual time, so that controllers can be tested and
// tuned deterministically in milliseconds before they touch a server.
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
//	speed_i = max(0.02, 1 − e_i·u) · min(1, C/n)
//
// where n is the number of running transactions over all stores, C is
// Plant.Parallelism (n ≤ C run at full speed; beyond, they share C as in
// processor sharing), u is the migration's share of the server and e_i the
// store's exposure to it (Store.Exposure: 1 for the store being moved, less
// for neighbours on the same disk). The speed is the same for every running
// transaction of a store, so the engine keeps one virtual-work clock per
// store and a heap of finish marks: an exact discrete-event simulation.
//
// Migration. A controller is asked for a Decision every Options.Step (1 s)
// and shown the latency of the last Options.Window (3 s) per store, with
// multiplicative Gaussian measurement noise (Options.Noise, 3%), plus the
// host's I/O figures derived from the load (IOPS, io_ticks, throughput and
// utilisation of a disk serving OpsPerTxn page reads per transaction and the
// migration's reads). Sends draw from a read-ahead buffer and read through to
// disk when it is empty; Decision.Prefetch fills the buffer up to
// Plant.Buffer. Only disk reads cost capacity: u = read rate / Plant.Capacity.
// Rates are clamped to [0, Plant.MaxRate]. The migration moves Plant.Size
// bytes and completes; the run stops Options.Tail after that, or abandons it
// at Options.MaxDuration.
//
// So service times stretch as 1/(1−u) as the migration speeds up (each I/O
// waits behind migration reads), and once (1−u)·C no longer covers the
// offered work the MPL queue grows without bound: Slacker's Fig. 5–6, a
// convex latency curve with a cliff.
//
// # Calibration
//
// DefaultPlant and the scenarios are Slacker's testbed scaled to
// milliseconds: a 1 GiB tenant, 440 transactions/s of 4 ms demand (CV 0.5,
// ten page accesses each) on a 16-way server, MPL 20. Idle latency is 4 ms;
// fixed rates give 6 ms at 4 MB/s, 11 ms at 8 MB/s, 20 ms at 10 MB/s, 26 ms at
// 10.5 MB/s and 47 ms at 11 MB/s; from about 11.2 MB/s the queue grows
// without bound, and the unthrottled 12 MB/s takes latency to seconds
// (Slacker: 79 ms idle, unbounded at 16 MB/s). Setpoints of 20–30 ms are
// reachable; a 30 ms setpoint uses about 10.5 MB/s and moves the tenant in
// about 100 s.
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
