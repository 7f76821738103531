# psycopg2 through the keyspace router (proxy/keyspace_clients_test.go),
# unchanged: autocommit off (psycopg2 sends BEGIN before the first
# statement of each transaction), parameters interpolated by the client
# (%s), so every statement is a simple Query. Keys below 100 are
# partition p1's, the rest p2's. The connection comes from PG* variables.
import psycopg2
import psycopg2.extensions as ext

STATUS = {ext.TRANSACTION_STATUS_IDLE: "idle", ext.TRANSACTION_STATUS_INTRANS: "in transaction",
          ext.TRANSACTION_STATUS_INERROR: "in failed transaction"}


def status(conn):
    return STATUS.get(conn.get_transaction_status(), "?")


def show(cur):
    for row in cur.fetchall():
        print("  ", row)


conn = psycopg2.connect("")
print("autocommit", conn.autocommit, "server_version", conn.server_version // 10000)
cur = conn.cursor()

# One transaction writing on both partitions: two-phase commit at commit().
cur.execute("INSERT INTO kv (k, v) VALUES (%s, %s)", (10, "ten"))
print("insert 10:", cur.rowcount, status(conn))
cur.executemany("INSERT INTO kv (k, v) VALUES (%s, %s)", [(110, "hundred and ten"), (11, "eleven"), (111, "hundred and eleven")])
print("executemany:", cur.rowcount)
conn.commit()
print("commit:", status(conn))

# A transaction rolled back on both partitions.
cur.execute("UPDATE kv SET v = %s WHERE k = %s", ("rolled back", 10))
cur.execute("UPDATE kv SET v = %s WHERE k = %s", ("rolled back", 110))
cur.execute("INSERT INTO kv (k, v) VALUES (%s, %s)", (12, "rolled back"))
conn.rollback()
print("rollback:", status(conn))

# A read over both partitions, a tuple adapted to an IN list, in key order.
cur.execute("SELECT k, v FROM kv WHERE k IN %s ORDER BY k DESC", ((10, 110, 11, 111, 12),))
print("select IN, %d rows:" % cur.rowcount)
show(cur)
conn.commit()

# A list is adapted to ARRAY[…]: k = ANY(%s) reads the owners of its
# elements, here both partitions, in key order; an empty list ('{}')
# matches nothing.
cur.execute("SELECT k, v FROM kv WHERE k = ANY(%s) ORDER BY k", ([111, 10, 110],))
print("select ANY, %d rows:" % cur.rowcount)
show(cur)
cur.execute("SELECT k, v FROM kv WHERE k = ANY(%s::int[])", ([],))
print("select ANY of nothing:", cur.rowcount)
conn.commit()

# The with-block commits; a string with a quote survives interpolation.
with conn:
    with conn.cursor() as c:
        c.execute("UPDATE kv SET v = %s WHERE k = %s", ("it's eleven", 11))
        c.execute("UPDATE kv SET v = v || %s WHERE k = %s", ("!", 111))
print("with-block:", status(conn))

# A server-side (named) cursor: DECLARE on the partition its query names,
# then FETCHes, which name no table, there too, though the transaction
# began on the other partition.
cur.execute("SELECT v FROM kv WHERE k = %s", (10,))
print("read 10:", cur.fetchone())
with conn.cursor(name="big") as c:
    c.itersize = 1
    c.execute("SELECT k, v FROM kv WHERE k = %s", (111,))
    for row in c:
        print("named cursor:", row)
conn.commit()

# A key given as a string literal of digits is read as PostgreSQL reads it.
cur.execute("SELECT v FROM kv WHERE k = %s", ("110",))
print("key '110':", cur.fetchall())
conn.commit()

# Errors: SQLSTATE in e.pgcode; the transaction fails and rolls back.
for sql, args in [("UPDATE kv SET v = %s", ("everywhere",)),
                  ("SELECT v FROM kv WHERE k = %s", ("abc",))]:
    try:
        cur.execute(sql, args)
        print("no error:", sql)
    except psycopg2.Error as e:
        print("error %s (%s):" % (e.pgcode, type(e).__name__), status(conn))
    conn.rollback()

# An error after a write in a transaction: the write is rolled back too.
cur.execute("UPDATE kv SET v = %s WHERE k = %s", ("lost", 10))
try:
    cur.execute("SELECT v::int FROM kv WHERE k = %s", (110,))
except psycopg2.Error as e:
    print("error %s:" % e.pgcode, status(conn))
try:
    cur.execute("UPDATE kv SET v = %s WHERE k = %s", ("ignored", 10))
except psycopg2.Error as e:
    print("error %s:" % e.pgcode, status(conn))
conn.rollback()

# Autocommit on: each statement its own transaction.
conn.autocommit = True
cur.execute("INSERT INTO kv (k, v) VALUES (%s, %s)", (13, "autocommit"))
cur.execute("SELECT k, v FROM kv WHERE k = %s", (13,))
show(cur)
print("autocommit:", status(conn))
conn.close()
print("done")
