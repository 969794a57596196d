// verify-webhook.mjs: checks one webhook delivery with the Standard Webhooks
// reference library (standardwebhooks on npm, installed beside the ACP SDK
// by make acp-sdk), not with Skein's own code.
//
// Usage: node verify-webhook.mjs SDK_DIR, with {secret, headers, body} as
// JSON on standard input. Prints the verified payload's type, or fails.

import { createRequire } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const requireFromSDK = createRequire(join(process.argv[2], "package.json"));
const { Webhook } = await import(pathToFileURL(requireFromSDK.resolve("standardwebhooks")).href);

let input = "";
for await (const chunk of process.stdin) input += chunk;
const { secret, headers, body } = JSON.parse(input);
const payload = new Webhook(secret).verify(body, headers);
console.log(payload.type);
