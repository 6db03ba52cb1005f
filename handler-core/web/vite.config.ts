import { defineConfig } from "vite";
import { svelte } from "@sveltejs/vite-plugin-svelte";

// The build handlerd embeds (decision 0106): deterministic names (content hashes), no inline
// script (the CSP refuses them), no module preload polyfill (an inline-free build).
export default defineConfig({
  plugins: [svelte()],
  // `HANDLERD=http://127.0.0.1:7430 npm run dev`: the dev server sends the API to a handlerd
  // started with HANDLER_ALLOWED_ORIGINS=http://127.0.0.1:5173 (its Origin check).
  server: {
    host: "127.0.0.1",
    port: 5173,
    proxy: process.env.HANDLERD
      ? { "/v1": { target: process.env.HANDLERD, changeOrigin: true, ws: true } }
      : undefined,
  },
  build: {
    outDir: "dist",
    emptyOutDir: true,
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
    sourcemap: false,
    target: "es2022",
    chunkSizeWarningLimit: 400,
    rollupOptions: {
      // zod's comments that Rollup cannot place (harmless: it drops them) would fill the log.
      onwarn(w, warn) {
        if (w.code !== "INVALID_ANNOTATION") warn(w);
      },
    },
  },
});
