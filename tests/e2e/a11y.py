"""The browser tests' accessibility check: axe-core (vendored from npm under
tests/e2e/vendor/axe-core, never served by the portal) injected into a page by Playwright."""

from pathlib import Path

from playwright.sync_api import Page

AXE = Path(__file__).parent / "vendor" / "axe-core" / "axe.min.js"
BLOCKING = ("serious", "critical")


def violations(page: Page) -> list[dict]:
    """axe's serious and critical violations of the page as it is now (WCAG 2.x A and AA)."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        # Evaluated through DevTools, not added as an inline <script>: the pages'
        # Content-Security-Policy refuses inline scripts, as it should.
        page.evaluate(AXE.read_text())
    found = page.evaluate("""async () => {
        const result = await axe.run(document, {
            runOnly: {type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa",
                                            "best-practice"]},
            resultTypes: ["violations"]});
        return result.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
            nodes: v.nodes.slice(0, 3).map(n => n.target.join(" ") + " :: " +
                (n.failureSummary || "").split("\\n").slice(0, 2).join(" "))}));
    }""")
    return [v for v in found if v["impact"] in BLOCKING]


def assert_accessible(page: Page, *, widget_rules: tuple[str, ...] = ()) -> None:
    """No serious or critical violation; `widget_rules`: rules a third-party widget's own
    markup breaks (named where it is used, with the reason), not counted."""
    found = [v for v in violations(page) if v["id"] not in widget_rules]
    assert not found, f"{page.url}: " + "; ".join(
        f"{v['id']} ({v['impact']}): {v['help']} at {v['nodes']}" for v in found)
