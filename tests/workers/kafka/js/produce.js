// kafkajs's producer against a streamgate listener: sends argv[3] messages with keys and
// headers to topic argv[2], compression argv[4] ("none" or "gzip": kafkajs's built-in codecs),
// and prints the acknowledged offsets as JSON. Env: KAFKA_BOOTSTRAP, KAFKA_USERNAME,
// KAFKA_PASSWORD.
const { CompressionTypes } = require("kafkajs");
const streamgateKafka = require("./client");

async function main([topic, count, codec]) {
  const kafka = streamgateKafka();
  const producer = kafka.producer({ allowAutoTopicCreation: false });
  await producer.connect();
  try {
    const messages = [...Array(Number(count)).keys()].map((i) => ({
      key: `k${i % 4}`, value: `js-${codec}-${i}`, headers: { h: `${i}` } }));
    const acks = await producer.send({
      topic, messages, acks: -1,
      compression: codec === "gzip" ? CompressionTypes.GZIP : CompressionTypes.None });
    console.log(JSON.stringify({ acks }));
  } finally {
    await producer.disconnect();
  }
}

main(process.argv.slice(2)).catch((error) => {
  console.log(JSON.stringify({ error: error.message, type: error.type || error.name }));
  process.exit(1);
});
