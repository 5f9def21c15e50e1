declare module "*.sql" {
  const text: string;
  export default text;
}

declare module "@scalar/api-reference/browser/standalone.js" {
  const path: string;
  export default path;
}
