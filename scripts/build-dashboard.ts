// Writes src/modules/dashboard/assets.generated.ts, the dashboard's browser code and stylesheet
// bundled as two strings (tools/dashboard-assets.ts). Run after changing the client:
//   bun scripts/build-dashboard.ts
import { writeFileSync } from "node:fs";
import { GENERATED_PATH, generateDashboardAssets } from "../tools/dashboard-assets";

const text = await generateDashboardAssets();
writeFileSync(GENERATED_PATH, text);
console.log(`wrote ${Bun.fileURLToPath(GENERATED_PATH)} (${text.length} bytes)`);
