// Svelte's options (svelte-check reads them; vite.config.ts passes the compiler's).
export default { compilerOptions: { css: "external" } };
