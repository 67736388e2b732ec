// kafkajs's admin client against a streamgate listener: creates the topics named in argv
// (MapR or plain names) and prints what listTopics and fetchTopicMetadata answer, as JSON.
// Env: KAFKA_BOOTSTRAP, KAFKA_USERNAME, KAFKA_PASSWORD.
const { Kafka, logLevel } = require("kafkajs");

async function main(topics) {
  const kafka = new Kafka({
    clientId: "streamgate-test",
    brokers: [process.env.KAFKA_BOOTSTRAP],
    sasl: { mechanism: "plain", username: process.env.KAFKA_USERNAME,
            password: process.env.KAFKA_PASSWORD },
    ssl: false,
    logLevel: logLevel.NOTHING,
    retry: { retries: 2 },
  });
  const admin = kafka.admin();
  await admin.connect();
  try {
    const created = await admin.createTopics({
      topics: topics.map((topic) => ({ topic, numPartitions: 2 })), waitForLeaders: true });
    const listed = await admin.listTopics();
    const metadata = await admin.fetchTopicMetadata({ topics });
    console.log(JSON.stringify({ created, listed, metadata }));
  } finally {
    await admin.disconnect();
  }
}

main(process.argv.slice(2)).catch((error) => {
  console.log(JSON.stringify({ error: error.message, type: error.type || error.name }));
  process.exit(1);
});
