// A smoke run of the official RocketMQ 5 Node.js SDK against apogee-broker's
// gRPC front end: a producer, a SimpleConsumer (receive and ack), a
// PushConsumer, and a delayed message recalled. Usage (docs/grpc.md):
//
//   npm install && node smoke.js 127.0.0.1:8081
//
// It exits 0 when every step did what it should, 1 otherwise.
const { Producer, SimpleConsumer, PushConsumer, ConsumeResult } = require('rocketmq-client-nodejs');

const endpoints = process.argv[2] || '127.0.0.1:8081';
const run = Date.now().toString(36); // fresh topics and groups every run
const log = (...a) => console.log(new Date().toISOString(), ...a);
const sleep = ms => new Promise(r => setTimeout(r, ms));
const check = (ok, what) => { if (!ok) throw new Error('FAILED: ' + what); log('ok:', what); };

(async () => {
  const producer = new Producer({ endpoints });
  await producer.startup();

  const simpleTopic = 'NodeSimple' + run;
  for (let i = 0; i < 5; i++) {
    await producer.send({ topic: simpleTopic, tag: 'a', keys: ['k' + i], body: Buffer.from('simple-' + i) });
  }
  const sc = new SimpleConsumer({ consumerGroup: 'NodeSimpleGroup' + run, endpoints,
    subscriptions: new Map().set(simpleTopic, 'a'), awaitDuration: 3000 });
  await sc.startup();
  const got = [];
  for (let tries = 0; got.length < 5 && tries < 10; tries++) {
    for (const m of await sc.receive(16, 15000)) {
      check(m.tag === 'a' && m.keys.length === 1 && !m.corrupted, 'message ' + m.body.toString() + ' with its tag and key');
      await sc.ack(m);
      got.push(m.body.toString());
    }
  }
  await sc.shutdown();
  check(got.sort().join() === 'simple-0,simple-1,simple-2,simple-3,simple-4', 'SimpleConsumer received and acked all 5');

  const pushTopic = 'NodePush' + run;
  const seen = new Set();
  const pc = new PushConsumer({ namespace: '', endpoints, consumerGroup: 'NodePushGroup' + run,
    subscriptions: new Map([[pushTopic, '*']]),
    messageListener: { consume(m) { seen.add(m.body.toString()); return ConsumeResult.SUCCESS; } } });
  await pc.startup();
  for (let i = 0; i < 5; i++) await producer.send({ topic: pushTopic, tag: 't', body: Buffer.from('push-' + i) });
  for (let i = 0; i < 60 && seen.size < 5; i++) await sleep(500);
  check(seen.size === 5, 'PushConsumer consumed all 5');
  await pc.shutdown();

  const d = await producer.send({ topic: 'NodeDelay' + run, tag: 'd', delay: 60000, body: Buffer.from('delayed') });
  check(!!d.recallHandle, 'a delayed message has a recall handle');
  const rc = await producer.recallMessage('NodeDelay' + run, d.recallHandle);
  check(rc.messageId === d.messageId, 'the delayed message was recalled');
  await producer.shutdown();
  log('DONE');
  process.exit(0);
})().catch(e => { console.error(e); process.exit(1); });
