// What the kafkajs scripts share: a client for a streamgate listener (SASL/PLAIN) and every
// compression codec. kafkajs builds in none and gzip only; snappy comes from its plugin
// kafkajs-snappy, lz4 and zstd from pure-JS/wasm libraries (lz4js, @bokuweb/zstd-wasm) wrapped
// in kafkajs's codec interface, so no native build is needed.
// Env: KAFKA_BOOTSTRAP, KAFKA_USERNAME, KAFKA_PASSWORD.
const { Kafka, CompressionTypes, CompressionCodecs, logLevel } = require("kafkajs");
const SnappyCodec = require("kafkajs-snappy");
const lz4 = require("lz4js");
const zstd = require("@bokuweb/zstd-wasm");

const ZSTD_LEVEL = 3;

async function registerCodecs() {
  await zstd.init();
  CompressionCodecs[CompressionTypes.Snappy] = SnappyCodec;
  CompressionCodecs[CompressionTypes.LZ4] = () => ({
    compress: async (encoder) => Buffer.from(lz4.compress(encoder.buffer)),
    decompress: async (buffer) => Buffer.from(lz4.decompress(buffer)),
  });
  CompressionCodecs[CompressionTypes.ZSTD] = () => ({
    compress: async (encoder) => Buffer.from(zstd.compress(encoder.buffer, ZSTD_LEVEL)),
    decompress: async (buffer) => Buffer.from(zstd.decompress(buffer)),
  });
}

const CODECS = {
  none: CompressionTypes.None, gzip: CompressionTypes.GZIP, snappy: CompressionTypes.Snappy,
  lz4: CompressionTypes.LZ4, zstd: CompressionTypes.ZSTD,
};

async function connect() {
  await registerCodecs();
  return new Kafka({
    clientId: "streamgate-test",
    brokers: [process.env.KAFKA_BOOTSTRAP],
    sasl: { mechanism: "plain", username: process.env.KAFKA_USERNAME,
            password: process.env.KAFKA_PASSWORD },
    ssl: false,
    logLevel: logLevel.NOTHING,
    retry: { retries: 2 },
  });
}

// Runs main(argv) and prints its answer as one JSON line; an error as {error, type}, exit 1.
function run(main) {
  main(process.argv.slice(2))
    .then((answer) => console.log(JSON.stringify(answer)))
    .catch((error) => {
      console.log(JSON.stringify({ error: error.message, type: error.type || error.name }));
      process.exit(1);
    });
}

module.exports = { CODECS, connect, run };
