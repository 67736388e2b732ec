// kafkajs's admin client against a streamgate listener: creates the topics named in argv
// (MapR or plain names) and prints what listTopics and fetchTopicMetadata answer, as JSON.
const { connect, run } = require("./client");

run(async (topics) => {
  const admin = (await connect()).admin();
  await admin.connect();
  try {
    const created = await admin.createTopics({
      topics: topics.map((topic) => ({ topic, numPartitions: 2 })), waitForLeaders: true });
    const listed = await admin.listTopics();
    const metadata = await admin.fetchTopicMetadata({ topics });
    return { created, listed, metadata };
  } finally {
    await admin.disconnect();
  }
});
