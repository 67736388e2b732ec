// kafkajs's consumer (it always joins a group) against a streamgate listener: group argv[1]
// reads topic argv[0] from the beginning until argv[2] messages have arrived, commits, and
// prints each message's partition, offset, key, value and headers as JSON.
const { connect, run } = require("./client");

const TIMEOUT_MS = 60000;

run(async ([topic, groupId, count]) => {
  const consumer = (await connect()).consumer({ groupId, sessionTimeout: 10000 });
  await consumer.connect();
  const messages = [];
  try {
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${messages.length} of ${count} read`)),
                               TIMEOUT_MS);
      consumer.run({
        eachMessage: async ({ partition, message }) => {
          messages.push({
            partition, offset: Number(message.offset), key: message.key.toString(),
            value: message.value.toString(),
            headers: Object.fromEntries(Object.entries(message.headers).map(
              ([name, value]) => [name, value.toString()])),
          });
          if (messages.length >= Number(count)) { clearTimeout(timer); resolve(); }
        },
      }).catch(reject);
    });
  } finally {
    await consumer.disconnect();
  }
  return { messages };
});
