// kafkajs's admin client against a streamgate listener: creates the topics named in argv
// (MapR or plain names) and prints what listTopics and fetchTopicMetadata answer, as JSON.
// Env: KAFKA_BOOTSTRAP, KAFKA_USERNAME, KAFKA_PASSWORD.
const streamgateKafka = require("./client");

async function main(topics) {
  const kafka = streamgateKafka();
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
