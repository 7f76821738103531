// Package fleet is the plant simulator at fleet scale: a thousand servers,
// ten thousand tenants, a rebalancing plan from plan/rebalance, executed
// move by move under one Aqueduct integral controller per server, in
// virtual time, deterministically from a seed. `sluice sim fleet` runs it.
//
// lab/sim simulates one server transaction by transaction; that costs
// about a second per simulated migration, too much for a thousand servers
// over hours. Here each server is a fluid queue stepped in 1 s windows,
// cheap enough that the whole fleet runs in seconds.
//
// # Fleet (Generate)
//
// Servers have a disk of bandwidth B_s (MinBandwidth..MaxBandwidth: the
// migration bytes/s that alone would fill it). Tenants have a size (a
// bounded Pareto law, MinSize..MaxSize, exponent SizeAlpha: most are a few
// GiB, a few are hundreds), a load (bounded Pareto weights, exponent
// LoadAlpha, scaled so the mean server carries MeanLoad of its capacity,
// capped at MaxTenantLoad), an idle-server latency L0_i (MinL0..MaxL0) and a
// contract LC_i = stretch × L0_i (stretch MinStretch..MaxStretch). Tenants
// are placed on random servers, each only where its server's peak load
// (the wave's crest plus twice the drift's bound) stays PlaceCeiling under
// the utilisation at which its tightest store meets its contract: with no
// migration, every contract holds. The skewed loads leave some servers well
// above the planner's Target; Plan asks plan/rebalance for the moves.
//
// # Server model
//
// Each second t, server s runs at utilisation
//
//	ρ_s(t) = fg_s(t) + r_s(t)/B_s
//	fg_s(t) = (Σ_{i on s} load_i) · (1 + WaveAmplitude·sin(2πt/WavePeriod + φ_s) + d_s(t))
//	d_s(t) = clamp(DriftCoef·d_s(t−1) + DriftSigma·N(0,1), ±6·DriftSigma)
//
// r_s the rate of the move s takes part in (a source reads, a destination
// writes: each costs its bytes against its own disk), and every store on it
// has mean latency L0_i / (1 − ρ_s) (M/M/1's stretch, the same form as
// control/tune's Queue; saturated at Saturation). A store's 1 s window mean
// is that times 1 + Noise·N(0,1), independently per store and window. A
// server's window violates when some store's window mean exceeds its
// contract. So every store on a server stretches alike, and the store with
// the smallest LC_i/L0_i reaches its contract first, at
// ρmax_s = 1 − max_i L0_i/LC_i: near that knee a few per cent of
// utilisation is the whole margin between 0.9·LC and LC.
//
// A move copies its tenant's bytes in SubMove (32 MiB) sub-moves, paced
// at the move's rate (throttle.Pacer's rule); the fluid model spreads each
// second's bytes evenly over the second. When the last byte is copied the
// tenant cuts over: its load and stores leave the source and join the
// destination, and both servers are free from the next second.
//
// # Execution (Run)
//
// Moves run several at once where they share no server: each second, every
// pending move whose source and destination are both free starts, in a
// fixed priority — the larger of the bytes its source and its destination
// move over the whole plan first (the busiest servers are the critical
// path), then plan order.
//
// Each server that takes part is tuned before the plan, as `sluice tune`
// profiles a live one: a staircase of fixed rates every B_s/ProfileSteps,
// ProfileHold noisy windows each, up to the first rung where a store is
// over its contract (refined below it if fewer than 4 rungs lie within);
// control/tune.FitQueue over the binding store's rungs, G = its GainAt(P·LC),
// K = (1 − Pole)/G (tune.ProposeK); the start rate is the highest rung that
// kept the binding store within StartShare of its contract. The profile
// takes no plan time.
//
// Each second a running move goes at min(MaxRate, R_source, R_destination),
// R_s the rate of server s's control.Integral — the product's controller,
// P and K as above — which each second sees every store on s: its mean of
// the last Window (3) windows and its contract. It acts on the worst store,
// min_i(P·LC_i − L_i). The side that did not bind is held to at most
// 1.25 × the move's rate + 1 MB/s (conditional integration: otherwise it
// winds up on an error its server never bore). A server's controller
// keeps its rate between its moves. There is no governor: the fluid model
// has no snapshot start-up to hide.
//
// # Oracle
//
// Oracle runs the same plan through the same load draws with the same
// start rule and priority, but sets every running move's rate each second
// to min(MaxRate, slack(source), slack(destination)),
// slack(s) = B_s·(ρmax_s − fg_s(t)): the rate at which the tightest store on
// each server sits exactly at its contract that second. It knows every
// server's load as it happens, measures nothing, has no noise, no window
// lag and no ramp: each move goes, every second, as fast as any
// controller could while keeping both servers' true latency within every
// contract. It bounds the plan's time for this schedule — the same moves
// under the same start rule — not over every order (list schedules have
// anomalies: a move that ends later can, rarely, let the rest finish
// sooner), and it runs every contract at 100 % where Run steers to P·LC.
// Its time is oracle_seconds.
//
// # Measures
//
// plan_seconds is the time from the plan's start to its last cutover (the
// last second counted in part). A server's violation fraction is the share
// of its 1 s windows while it took part in a move in which some store on
// it was over its contract (Aqueduct's VR, per server); the worst over the
// servers that took part is worst_violation_fraction. Servers that took
// part in no move are reported apart (BystanderViolation, over the whole
// plan).
//
// # Determinism
//
// Generation, each server's load drift and the measurement noise each have
// their own PCG stream seeded from Config.Seed; Run and Oracle draw the
// same loads. No goroutines, no wall clock.
package fleet
