// The Products page: a GTIN's offers and its price history, asked of the data API with one of the
// organization's API keys (the data endpoints take a key, never the session; see docs/api.md,
// "Which credential each endpoint takes"), so every look-up is billed as the page says before it is
// sent. The key stays in this module's memory until the page is left or reloaded.
import { APIError, call, type Money } from "../api";
import type { PageContext } from "../context";
import { h, replace, s } from "../dom";
import { formatDate, t } from "../i18n";

interface Offer {
  merchant: { id: string; name: string };
  price: Money;
  shipping: Money | null;
  availabilityLabel: string;
}

interface PriceAnswer {
  data: { product: { gtin: string; title: string; brand: string | null }; offers: Offer[] };
}

interface DayPoint {
  merchant: { id: string; name: string };
  day: string;
  lowestPrice: Money;
  highestPrice: Money;
  lastPrice: Money;
}

interface HistoryAnswer {
  data: { points: DayPoint[] };
}

const RANGES = [7, 30, 90, 365];
const HISTORY_LIMIT = 5000;
const DAY_MS = 86_400_000;
/** Line colours, told apart by the legend and the table too (never by colour alone). */
const COLOURS = ["#1f6feb", "#d1242f", "#1a7f37", "#9a6700", "#8250df", "#57606a"];

/** The API key typed on this page, in memory only. */
let apiKey = "";

/**
 * A data call with the page's key. Its problems go to the shell, but a 401 is the key's, not the
 * session's: shown as a message, it does not sign the user out.
 */
function dataCall<T>(path: string): Promise<T> {
  return call<T>("GET", path, { apiKey });
}

function failData(context: PageContext, error: unknown): void {
  context.fail(error instanceof APIError && error.status === 401 ? new Error(error.message) : error);
}

export async function renderProducts(context: PageContext, root: HTMLElement): Promise<void> {
  const keyInput = h("input", { id: "api-key", type: "password", autocomplete: "off", required: true, value: apiKey });
  const gtinInput = h("input", { id: "gtin", inputmode: "numeric", required: true, "aria-describedby": "billed-note" });
  const submit = h("button", { type: "submit" }, t("productsLookUp"));
  const result = h("div", { class: "stack", id: "product-result" });
  const form = h(
    "form",
    { class: "panel stack" },
    h("label", { for: "api-key" }, t("productsKeyLabel")),
    keyInput,
    h("label", { for: "gtin" }, t("productsGtinLabel")),
    gtinInput,
    h("p", { id: "billed-note", class: "note" }, t("productsBilledNote")),
    h("div", { class: "row" }, submit),
  );
  root.append(h("p", {}, t("productsIntro")), form, result);
  context.heading(t("productsTitle"));

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    apiKey = keyInput.value.trim();
    submit.disabled = true;
    try {
      const gtin = gtinInput.value.replace(/[\s-]/g, "");
      const answer = await dataCall<PriceAnswer>(`/products/${encodeURIComponent(gtin)}/price`);
      replace(result, productPanel(context, answer));
      result.querySelector("h2")?.focus();
    } catch (error) {
      replace(result);
      failData(context, error);
    } finally {
      submit.disabled = false;
    }
  });
}

function productPanel(context: PageContext, answer: PriceAnswer): HTMLElement {
  const { product, offers } = answer.data;
  const watch = h("button", { type: "button", class: "secondary" }, t("productsWatch"));
  watch.addEventListener("click", async () => {
    watch.disabled = true;
    try {
      await call("POST", "/customer/watches", { body: { gtin: product.gtin, trigger: "any-change" } });
      context.announce(t("productsWatching", { gtin: product.gtin }));
    } catch (error) {
      // The watch endpoint takes the session: its problems (a 401 included) are the shell's.
      context.fail(error);
    } finally {
      watch.disabled = false;
    }
  });
  const table =
    offers.length === 0
      ? h("p", { class: "muted" }, t("productsNoOffers"))
      : h(
          "table",
          {},
          h("caption", {}, t("productsOffersCaption", { title: product.title })),
          h(
            "thead",
            {},
            h("tr", {}, ...[t("colMerchant"), t("colPrice"), t("colShipping"), t("colAvailability")].map((label) => h("th", { scope: "col" }, label))),
          ),
          h(
            "tbody",
            {},
            ...offers.map((offer) =>
              h(
                "tr",
                {},
                h("th", { scope: "row" }, offer.merchant.name),
                h("td", { class: "num" }, offer.price.formatted),
                h("td", { class: "num" }, offer.shipping?.formatted ?? "–"),
                h("td", {}, offer.availabilityLabel),
              ),
            ),
          ),
        );
  return h(
    "section",
    { class: "panel stack", "aria-labelledby": "product-title" },
    h("h2", { id: "product-title", tabindex: -1 }, product.title),
    h("div", { class: "row" }, watch),
    table,
    historyPanel(context, product.gtin),
  );
}

function historyPanel(context: PageContext, gtin: string): HTMLElement {
  const range = h(
    "select",
    { id: "history-range", "aria-labelledby": "history-title", "aria-describedby": "history-note" },
    ...RANGES.map((days) => h("option", { value: days, selected: days === 30 }, t("historyDays", { n: days }))),
  );
  const show = h("button", { type: "button" }, t("historyShow"));
  const output = h("div", { class: "stack", id: "history-output" });
  show.addEventListener("click", async () => {
    show.disabled = true;
    try {
      const from = new Date(Date.now() - Number(range.value) * DAY_MS).toISOString();
      const answer = await dataCall<HistoryAnswer>(
        `/products/${encodeURIComponent(gtin)}/price/history?interval=day&limit=${HISTORY_LIMIT}&from=${encodeURIComponent(from)}`,
      );
      replace(output, ...historyView(answer));
    } catch (error) {
      replace(output);
      failData(context, error);
    } finally {
      show.disabled = false;
    }
  });
  return h(
    "section",
    { class: "stack", "aria-labelledby": "history-title" },
    h("h3", { id: "history-title" }, t("historyTitle")),
    h("div", { class: "row" }, range, show),
    h("p", { id: "history-note", class: "note" }, t("historyBilledNote")),
    output,
  );
}

/** The chart (one line per merchant, its last price of each day), its legend, and the same points as a table. */
function historyView(answer: HistoryAnswer): Node[] {
  // One page of up to HISTORY_LIMIT points: a year of up to 13 merchants.
  const { points } = answer.data;
  if (points.length === 0) return [h("p", { class: "muted" }, t("historyNone"))];
  const merchants = [...new Map(points.map((point) => [point.merchant.id, point.merchant.name])).entries()].sort(([a], [b]) => (a < b ? -1 : 1));
  const colour = new Map(merchants.map(([id], index) => [id, COLOURS[index % COLOURS.length]!]));
  const days = [...new Set(points.map((point) => point.day))].sort();
  const lowest = points.reduce((low, point) => (point.lastPrice.amount < low.amount ? point.lastPrice : low), points[0]!.lastPrice);
  const highest = points.reduce((high, point) => (point.lastPrice.amount > high.amount ? point.lastPrice : high), points[0]!.lastPrice);
  const summary = t("historyChart", {
    from: formatDate(days[0]!),
    to: formatDate(days[days.length - 1]!),
    merchants: merchants.length,
    lowest: lowest.formatted,
    highest: highest.formatted,
  });
  return [
    priceChart(points, days, merchants, colour, { summary, lowest, highest }),
    h(
      "ul",
      { class: "legend", "aria-label": t("colMerchant") },
      ...merchants.map(([id, name]) =>
        h("li", {}, s("svg", { width: 14, height: 14, "aria-hidden": "true" }, s("rect", { width: 14, height: 14, fill: colour.get(id)! })), ` ${name}`),
      ),
    ),
    h(
      "details",
      {},
      h("summary", {}, t("historyTable")),
      h(
        "table",
        {},
        h("caption", {}, t("historyTitle")),
        h(
          "thead",
          {},
          h("tr", {}, ...[t("colDay"), t("colMerchant"), t("colLowest"), t("colHighest"), t("colLast")].map((label) => h("th", { scope: "col" }, label))),
        ),
        h(
          "tbody",
          {},
          ...points.map((point) =>
            h(
              "tr",
              {},
              h("td", {}, formatDate(point.day)),
              h("th", { scope: "row" }, point.merchant.name),
              h("td", { class: "num" }, point.lowestPrice.formatted),
              h("td", { class: "num" }, point.highestPrice.formatted),
              h("td", { class: "num" }, point.lastPrice.formatted),
            ),
          ),
        ),
      ),
    ),
  ];
}

const WIDTH = 640;
const HEIGHT = 240;
const LEFT = 72;
const BOTTOM = 28;
const TOP = 12;

/** An inline SVG line chart: x the days, y the last price of the day; one polyline per merchant. */
function priceChart(
  points: DayPoint[],
  days: string[],
  merchants: Array<[string, string]>,
  colour: Map<string, string>,
  texts: { summary: string; lowest: Money; highest: Money },
): SVGSVGElement {
  const low = texts.lowest.amount;
  const span = Math.max(1, texts.highest.amount - low);
  const plotWidth = WIDTH - LEFT - 8;
  const plotHeight = HEIGHT - TOP - BOTTOM;
  const dayIndex = new Map(days.map((day, index) => [day, index]));
  const x = (day: string) => LEFT + (days.length === 1 ? plotWidth / 2 : (dayIndex.get(day)! / (days.length - 1)) * plotWidth);
  const y = (amount: number) => TOP + plotHeight - ((amount - low) / span) * plotHeight;
  const lines = merchants.map(([id, name]) => {
    const own = points.filter((point) => point.merchant.id === id);
    return s(
      "polyline",
      {
        class: "line",
        fill: "none",
        stroke: colour.get(id)!,
        "stroke-width": 2,
        points: own.map((point) => `${x(point.day).toFixed(1)},${y(point.lastPrice.amount).toFixed(1)}`).join(" "),
      },
      s("title", {}, name),
    );
  });
  const axisText = (attributes: Record<string, string | number>, text: string) => s("text", attributes, text);
  return s(
    "svg",
    { class: "chart", viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: "img", "aria-label": texts.summary, preserveAspectRatio: "xMidYMid meet" },
    s(
      "g",
      { class: "grid" },
      s("line", { x1: LEFT, x2: WIDTH, y1: y(low), y2: y(low) }),
      s("line", { x1: LEFT, x2: WIDTH, y1: y(texts.highest.amount), y2: y(texts.highest.amount) }),
    ),
    axisText({ x: LEFT - 6, y: y(texts.highest.amount) + 4, "text-anchor": "end" }, texts.highest.formatted),
    axisText({ x: LEFT - 6, y: y(low) + 4, "text-anchor": "end" }, texts.lowest.formatted),
    ...lines,
    axisText({ class: "axis", x: LEFT, y: HEIGHT - 8, "text-anchor": "start" }, formatDate(days[0]!)),
    axisText({ class: "axis", x: WIDTH - 8, y: HEIGHT - 8, "text-anchor": "end" }, formatDate(days[days.length - 1]!)),
  );
}
