import { mount } from "svelte";
import App from "./App.svelte";
import "./app.css";
import { adoptFragmentToken } from "./lib/token";

adoptFragmentToken();
mount(App, { target: document.getElementById("app")! });
