// The awslabs aws-kinesis-agg implementation of the KPL aggregated record format, driven over
// JSON lines, so the integration suite checks kinesis-broker against a codec it did not write.
//
//   node kpl_agg.js aggregate    in: {"partitionKey", "explicitHashKey"?, "data": base64}
//                                out: one line per aggregated record, same fields
//   node kpl_agg.js deaggregate  in: {"partitionKey", "sequenceNumber", "data": base64}
//                                out: one line per user record: partitionKey,
//                                     explicitPartitionKey, sequenceNumber,
//                                     subSequenceNumber, data (base64)
//
// NODE_PATH must name the node_modules that holds aws-kinesis-agg (`cargo xtask integ` sets it).
'use strict';
const agg = require('aws-kinesis-agg');

const mode = process.argv[2];
let input = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', (chunk) => { input += chunk; });
process.stdin.on('end', () => {
  const lines = input.split('\n').filter((l) => l.trim() !== '').map((l) => JSON.parse(l));
  const fail = (err) => { console.error(`kpl_agg.js ${mode}: ${err}`); process.exit(1); };
  if (mode === 'aggregate') {
    const records = lines.map((l) => {
      const r = { partitionKey: l.partitionKey, data: Buffer.from(l.data, 'base64') };
      if (l.explicitHashKey) { r.explicitHashKey = l.explicitHashKey; }
      return r;
    });
    const out = [];
    agg.aggregate(records, (encoded, done) => {
      out.push({
        partitionKey: encoded.partitionKey,
        explicitHashKey: encoded.explicitHashKey || null,
        data: Buffer.from(encoded.data).toString('base64'),
      });
      done();
    }, () => {
      process.stdout.write(out.map((o) => JSON.stringify(o)).join('\n') + '\n');
    }, fail);
  } else if (mode === 'deaggregate') {
    const out = [];
    for (const l of lines) {
      agg.deaggregateSync({
        partitionKey: l.partitionKey,
        sequenceNumber: l.sequenceNumber,
        data: l.data,
        approximateArrivalTimestamp: 0,
      }, true, (err, records) => {
        if (err) { fail(err); }
        for (const r of records) {
          out.push({
            partitionKey: r.partitionKey,
            explicitPartitionKey: r.explicitPartitionKey || null,
            sequenceNumber: String(r.sequenceNumber),
            subSequenceNumber: r.subSequenceNumber === undefined ? null : r.subSequenceNumber,
            data: Buffer.from(r.data, 'base64').toString('base64'),
          });
        }
      });
    }
    process.stdout.write(out.map((o) => JSON.stringify(o)).join('\n') + '\n');
  } else {
    fail('usage: kpl_agg.js aggregate|deaggregate');
  }
});
