// kafkajs's producer against a streamgate listener: sends argv[1] messages with keys and
// headers to topic argv[0], compressed with argv[2] (none, gzip, snappy, lz4 or zstd), valued
// <argv[3]>-<i> (default js-<codec>-<i>), and prints the acknowledged offsets as JSON.
const { CODECS, connect, run } = require("./client");

run(async ([topic, count, codec, prefix = `js-${codec}`]) => {
  const producer = (await connect()).producer({ allowAutoTopicCreation: false });
  await producer.connect();
  try {
    const messages = [...Array(Number(count)).keys()].map((i) => ({
      key: `k${i % 4}`, value: `${prefix}-${i}`, headers: { h: `${i}` } }));
    const acks = await producer.send({ topic, messages, acks: -1, compression: CODECS[codec] });
    return { acks };
  } finally {
    await producer.disconnect();
  }
});
