// The kafkajs client both scripts use: a streamgate listener over SASL/PLAIN, no TLS, quiet,
// two retries. Env: KAFKA_BOOTSTRAP, KAFKA_USERNAME, KAFKA_PASSWORD.
const { Kafka, logLevel } = require("kafkajs");

module.exports = function streamgateKafka() {
  return new Kafka({
    clientId: "streamgate-test",
    brokers: [process.env.KAFKA_BOOTSTRAP],
    sasl: { mechanism: "plain", username: process.env.KAFKA_USERNAME,
            password: process.env.KAFKA_PASSWORD },
    ssl: false,
    logLevel: logLevel.NOTHING,
    retry: { retries: 2 },
  });
};
