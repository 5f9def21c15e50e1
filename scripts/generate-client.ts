// Writes test/client/generated/, the fetch client generated from the service's own /openapi.json
// (tools/client.ts). Run after changing a route: bun run generate:client
import { CLIENT_DIRECTORY, generateClient } from "../tools/client";

await generateClient(CLIENT_DIRECTORY);
console.log(`wrote ${CLIENT_DIRECTORY}`);
