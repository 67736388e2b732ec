// Copy buttons: <button data-copy="#selector"> copies that input's value to the clipboard
// (a static file: the Content-Security-Policy allows no inline script).
"use strict";
document.addEventListener("click", async (event) => {
  const button = event.target.closest("[data-copy]");
  if (!button) return;
  const field = document.querySelector(button.dataset.copy);
  if (!field) return;
  field.select();
  try {
    await navigator.clipboard.writeText(field.value);
  } catch {
    document.execCommand("copy"); // an http:// page has no clipboard API
  }
  button.textContent = "Copied";
});
