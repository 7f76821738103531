// Package dashboard is the operator's live page, served by every agent at
// Prefix (/ui/): plain HTML, CSS and JavaScript embedded in the binary (no
// build step, no CDN, nothing fetched from the internet), charts drawn on a
// <canvas> by the page itself.
//
// The page holds no data: its static files are served without a token
// (Open), and everything it shows comes from the agent's API with the
// agent's bearer token, the same requests and the same authentication as
// the CLI's:
//
//	GET  /v1/overview                     once a second: migrations with live progress and
//	                                      summaries, tenants here and on the peers, keyspaces
//	                                      with their reconfiguration, the plans it drives,
//	                                      the proxy's windows
//	GET  /v1/migrations/{id}/series?since=T   the control loop's new points (latency,
//	                                      setpoint, rate) for the charts
//	POST /v1/migrations/{id}/rate|pause|resume|abort   the operator's actions
//
// The token reaches the page once, in the URL's fragment
// (http://agent:7070/ui/#token=…, as `sluice dashboard` prints it): a
// fragment is never sent to a server, so it lands in no access log. The
// page moves it to the tab's sessionStorage, removes it from the address
// bar and sends it as "Authorization: Bearer …" with every request; a page
// opened without it asks for it. Closing the tab forgets it.
package dashboard
