package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// serverConn is one session's connection to a PostgreSQL server, opened and
// authenticated by pgconn and then taken over (Hijack) for raw relaying.
type serverConn struct {
	conn     net.Conn
	r        *bufio.Reader
	w        *bufio.Writer
	addr     string // host:port
	database string
	pid      uint32
	secret   []byte
	params   map[string]string // ParameterStatus values reported at startup
	// stmts are the named prepared statements Prepare created on this
	// session before it was attached (name → raw Parse); nil after.
	stmts    map[string][]byte
	detached atomic.Bool   // set before an intentional close: the reader exits quietly
	done     chan struct{} // closed when the reader goroutine has exited
}

// settableParams are reported parameters a session may have changed with SET
// that are restored, as startup parameters, on a new server at handover.
var settableParams = []string{"application_name", "client_encoding", "DateStyle", "IntervalStyle",
	"TimeZone", "standard_conforming_strings", "default_transaction_read_only", "search_path"}

// dialServer opens a server session for user on route r with startup
// parameters params (user and database excluded).
func (p *Proxy) dialServer(ctx context.Context, r RouteConfig, user string, params map[string]string) (*serverConn, error) {
	host, port, err := net.SplitHostPort(r.Addr)
	if err != nil {
		return nil, fmt.Errorf("proxy: dial %s: %w", r.Addr, err)
	}
	if _, err := strconv.Atoi(port); err != nil {
		return nil, fmt.Errorf("proxy: dial %s: bad port", r.Addr)
	}
	cfg, err := pgconn.ParseConfig(fmt.Sprintf("host=%s port=%s sslmode=%s", host, port, p.cfg.ServerSSLMode))
	if err != nil {
		return nil, fmt.Errorf("proxy: dial %s: %w", r.Addr, err)
	}
	cfg.User = user
	cfg.Password = p.serverPassword(user)
	cfg.Database = r.Database
	cfg.RuntimeParams = map[string]string{}
	for k, v := range params {
		cfg.RuntimeParams[k] = v
	}
	cfg.ConnectTimeout = p.cfg.DialTimeout
	ctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
	defer cancel()
	pc, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	// pgconn may still have a background reader blocked in a Read of the
	// socket (started when one of its startup writes was slow): it would
	// take the server's first answer after the hijack, and the session
	// would wait for it forever. SyncConn stops it (pinging if need be).
	if err := pc.SyncConn(ctx); err != nil {
		pc.Close(context.Background())
		return nil, fmt.Errorf("proxy: dial %s: %w", r.Addr, err)
	}
	hj, err := pc.Hijack()
	if err != nil {
		pc.Close(context.Background())
		return nil, fmt.Errorf("proxy: dial %s: hijack: %w", r.Addr, err)
	}
	conn := fastConn(hj.Conn)
	sc := &serverConn{
		conn:     conn,
		r:        bufio.NewReaderSize(conn, 16<<10),
		w:        bufio.NewWriterSize(conn, 16<<10),
		addr:     r.Addr,
		database: r.Database,
		pid:      hj.PID,
		secret:   hj.SecretKey,
		params:   hj.ParameterStatuses,
		done:     make(chan struct{}),
	}
	return sc, nil
}

// serverNetAddr maps a route address host:port to what net.Dial wants: TCP,
// or, when host is a directory (starts with "/"), PostgreSQL's Unix socket
// host/.s.PGSQL.port in it.
func serverNetAddr(addr string) (network, address string) {
	host, port, err := net.SplitHostPort(addr)
	if err == nil && strings.HasPrefix(host, "/") {
		return "unix", host + "/.s.PGSQL." + port
	}
	return "tcp", addr
}

// close terminates the server session politely (Terminate, then close).
func (sc *serverConn) close() {
	sc.detached.Store(true)
	sc.w.Write([]byte{'X', 0, 0, 0, 4})
	sc.w.Flush()
	sc.conn.Close()
}

// cancel sends a CancelRequest for this server session's backend.
func (sc *serverConn) cancel(ctx context.Context) error {
	return sendCancel(ctx, sc.addr, sc.pid, sc.secret)
}

// sendCancel sends a CancelRequest for backend pid (with its secret key)
// to the server at route address addr, and waits for the server to close
// the connection, so that the cancel has been processed when it returns.
func sendCancel(ctx context.Context, addr string, pid uint32, secret []byte) error {
	var d net.Dialer
	network, address := serverNetAddr(addr)
	c, err := d.DialContext(ctx, network, address)
	if err != nil {
		return fmt.Errorf("proxy: cancel on %s: %w", addr, err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	b := encodeMsg(nil, &pgproto3.CancelRequest{ProcessID: pid, SecretKey: secret})
	if _, err := c.Write(b); err != nil {
		return fmt.Errorf("proxy: cancel on %s: %w", addr, err)
	}
	var one [1]byte
	c.Read(one[:])
	return nil
}

// pgErrorResponse converts a connect error into the ErrorResponse for the client.
func pgErrorResponse(err error) *pgproto3.ErrorResponse {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return &pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: pe.Code,
			Message: pe.Message, Detail: pe.Detail, Hint: pe.Hint}
	}
	return fatal(codeCannotConnect, "sluice proxy: could not connect to server: "+err.Error())
}

// pipeline sends each of msgs (raw messages) followed by Sync, in one write,
// and reads the answers up to each ReadyForQuery; failed[i] reports whether
// msgs[i] drew an ErrorResponse. sc must be idle (no reader goroutine yet).
// timeout bounds the whole exchange.
func (sc *serverConn) pipeline(msgs [][]byte, timeout time.Duration) (failed []bool, err error) {
	sc.conn.SetDeadline(time.Now().Add(timeout))
	defer sc.conn.SetDeadline(time.Time{})
	for _, m := range msgs {
		sc.w.Write(m)
		sc.w.Write([]byte{'S', 0, 0, 0, 4})
	}
	if err := sc.w.Flush(); err != nil {
		return nil, err
	}
	failed = make([]bool, len(msgs))
	var hdr [5]byte
	var buf []byte
	for i := 0; i < len(msgs); {
		typ, n, err := readHeader(sc.r, &hdr)
		if err != nil {
			return nil, err
		}
		if buf, err = readBody(sc.r, buf, n); err != nil {
			return nil, err
		}
		switch typ {
		case 'E':
			failed[i] = true
		case 'Z':
			i++
		}
	}
	return failed, nil
}
