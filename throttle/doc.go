// Package throttle applies a controller's rate to data movement.
//
// Two actuators live here, both driven by a rate in bytes per second that a
// controller (package control) may change many times a second:
//
//   - Limiter is a token bucket for byte streams. A sender calls WaitN before
//     each chunk it writes; the control loop calls SetRate every step. A lowered
//     rate applies to the rest of every wait already in progress, a rate of 0
//     pauses, and a raised rate wakes sleeping waiters at once.
//   - Pacer paces chunked moves the way Aqueduct's actuator does (FAST 2002,
//     §3.1): after a sub-move of W bytes that took T_j, sleep max(0, W/R − T_j)
//     (Delay is that rule as a pure function). Unlike the paper it makes up
//     to PacerCatchUp of wake-up lateness, or timer lateness would cap the
//     rate at high speeds.
//
// Both bound how much a held-up sender may make up: the Limiter's auto burst
// is 20 ms worth of the rate, at least 512 KiB (AutoBurstWindow), and the Pacer
// makes up at most PacerCatchUp (20 ms). A stream that stalled longer loses
// the excess rather than flooding the servers when it resumes.
//
// Rates are float64 bytes per second: math.Inf(1) means unlimited, 0 means
// paused, and negative or NaN rates are treated as 0 (paused), the safe side.
//
// Time is a parameter: both types read the clock only through a Clock, so
// tests run them on a fake clock; the token arithmetic itself is a pure bucket
// that takes the time as an argument (bucket.go).
package throttle
