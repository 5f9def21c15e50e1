import { type Command, output, UsageError, wholeNumber, parseCommandArgs } from "../command";

export const healthcheckCommand: Command = {
  name: "healthcheck",
  summary: "Exit 0 when the server on PORT answers /healthz (Docker HEALTHCHECK; the image has no curl)",
  usage: "healthcheck [--ready] [--timeout MS] [--json]   (--ready checks /readyz, which also reaches the database)",
  async run(context) {
    const { values } = parseCommandArgs(context, "healthcheck", { ready: { type: "boolean", default: false }, timeout: { type: "string", default: "2000" } });
    const path = values.ready === true ? "/readyz" : "/healthz";
    const url = `http://127.0.0.1:${context.config.port}${path}`;
    let response: Response;
    try {
      response = await fetch(url, { signal: AbortSignal.timeout(wholeNumber(values.timeout!, "timeout")) });
    } catch (error) {
      if (error instanceof UsageError) throw error;
      throw new Error(`${url} did not answer: ${error instanceof Error ? error.message : String(error)}`);
    }
    if (!response.ok) throw new Error(`${url} answered ${response.status}`);
    output(context, values.json === true, { path, status: response.status }, `${path} ok`);
  },
};
