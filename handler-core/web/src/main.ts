import { mount } from "svelte";
import App from "./App.svelte";
import "./app.css";
import { adoptFragmentToken } from "./lib/token";
import { sync } from "./lib/router.svelte";

// The token first (a one-time code is exchanged for it), then the app.
void adoptFragmentToken().finally(() => {
  sync();
  mount(App, { target: document.getElementById("app")! });
});
