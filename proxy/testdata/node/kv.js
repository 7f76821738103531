// node-postgres (npm pg) through the keyspace router
// (proxy/keyspace_clients_test.go), unchanged: named prepared statements
// ({name, text, values}) are parsed once per connection by pg, and then
// only bound; the router parses them on each partition a Bind reaches.
// Keys below 100 are partition p1's, the rest p2's. The connection comes
// from PG* variables.
'use strict';
const { Client } = require('pg');

const insert = { name: 'insert', text: 'INSERT INTO kv (k, v) VALUES ($1, $2)' };
const update = { name: 'update', text: 'UPDATE kv SET v = v || $2 WHERE k = $1 RETURNING k, v' };
const select = { name: 'select', text: 'SELECT k, v FROM kv WHERE k IN ($1, $2, $3) ORDER BY k' };
const get = { name: 'get', text: 'SELECT v FROM kv WHERE k = $1' };

async function main() {
  const c = new Client();
  await c.connect();
  const show = (what, res) => console.log(what, res.command, res.rowCount, JSON.stringify(res.rows));
  const code = async (what, q) => {
    try {
      await c.query(q);
      console.log(what, 'no error');
    } catch (e) {
      console.log(what, 'error', e.code);
    }
  };

  // One statement, reused on both partitions.
  for (const [k, v] of [[20, 'twenty'], [120, 'hundred and twenty'], [21, 'twenty-one'], [121, 'hundred and twenty-one']]) {
    show(`insert ${k}:`, await c.query({ ...insert, values: [k, v] }));
  }
  show('get 120:', await c.query({ ...get, values: [120] }));
  show('get 20:', await c.query({ ...get, values: [20] }));

  // A transaction on both partitions (two-phase commit), the statements
  // already prepared and new ones.
  await c.query('BEGIN');
  show('update 20:', await c.query({ ...update, values: [20, '+'] }));
  show('update 120:', await c.query({ ...update, values: [120, '+'] }));
  show('insert 22:', await c.query({ ...insert, values: [22, 'twenty-two'] }));
  show('insert 122:', await c.query({ ...insert, values: [122, 'hundred and twenty-two'] }));
  show('commit:', await c.query('COMMIT'));

  // A transaction rolled back on both.
  await c.query('BEGIN');
  await c.query({ ...update, values: [21, ' rolled back'] });
  await c.query({ ...update, values: [121, ' rolled back'] });
  show('rollback:', await c.query('ROLLBACK'));

  // A read over both partitions, rows as arrays, in key order.
  show('select arrays:', await c.query({ ...select, values: [122, 20, 121], rowMode: 'array' }));
  show('select objects:', await c.query({ ...select, values: [21, 120, 22] }));
  // An array parameter (pg sends it as text, '{…}'): the owners of its
  // elements, in key order; a named statement bound with an array over
  // one partition, then over both.
  const any = { name: 'any', text: 'SELECT k FROM kv WHERE k = ANY($1) ORDER BY k' };
  show('any, one partition:', await c.query({ ...any, values: [[121, 122]] }));
  show('any, both:', await c.query({ ...any, values: [[122, 20, 121]] }));
  await code('any, a null element:', { ...any, values: [[20, null]] });
  // Unnamed statements with parameters.
  show('unnamed:', await c.query('SELECT k, v FROM kv WHERE k = $1', [121]));

  // Errors carry their SQLSTATE; the connection goes on.
  await code('no key:', { name: 'nokey', text: 'UPDATE kv SET v = $1', values: ['everywhere'] });
  await code('wrong type:', { ...get, values: ['abc'] });
  // A statement whose first use is refused before it reaches a server is
  // still prepared, as PostgreSQL parses before it binds: pg sent its Parse
  // once and will only bind it from now on.
  const fresh = { name: 'fresh', text: 'SELECT k, v FROM kv WHERE k = $1' };
  await code('first use, wrong type:', { ...fresh, values: ['abc'] });
  show('second use:', await c.query({ ...fresh, values: [121] }));
  await code('duplicate key:', { ...insert, values: [120, 'again'] });
  await c.query('BEGIN');
  await code('in a block:', { ...insert, values: [23, 'twenty-three'] });
  await code('in a block:', { text: 'SELECT 1 / 0 FROM kv WHERE k = $1', values: [123] });
  await code('failed block:', { ...get, values: [23] });
  show('rollback:', await c.query('ROLLBACK'));
  show('after errors:', await c.query({ ...get, values: [122] }));
  await c.end();
  console.log('done');
}

main().catch((e) => {
  console.error('FAILED', e.code, e.message);
  process.exit(1);
});
