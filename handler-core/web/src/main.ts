import { mount } from "svelte";
import App from "./App.svelte";
import "./app.css";
import { adoptFragmentToken } from "./lib/token";
import { sync } from "./lib/router.svelte";

adoptFragmentToken();
sync();
mount(App, { target: document.getElementById("app")! });
