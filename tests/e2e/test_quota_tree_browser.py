"""The quota tree in a real browser: a department admin changes a child's weight and sees the fair shares move, adds
a child and sets its quota; the top bar stays one line."""

import pytest
from playwright.sync_api import expect

from core.models import Department, Membership

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_admin_changes_a_childs_weight_and_sees_the_fair_shares_move(world, console):
    """Two teams under ml-search (adam administers it) each want 6 of the cluster's 8 A100: equal weights split what
    is left over evenly; weight 3 on search-a gives it three quarters."""
    search = world.departments["ml-search"]
    for name in ("search-a", "search-b"):
        team = Department.objects.create(name=name, parent=search)
        Membership.objects.create(user=world.users["member"], department=team)
        jobs = [world.submit(department=name, name=f"{name}-{n}", gpu_model="A100", gpus="2") for n in range(3)]
        world.hold(jobs[0], gpu_model="A100", quota_kind="borrowed")  # 2 running, 4 waiting
    page = console.page
    console.sign_in("adam")
    console.follow("Quota tree")
    fair = {name: page.locator(f'tr[data-node="{name}"] td.tree-bar').nth(0).locator(".fair-share")
            for name in ("search-a", "search-b")}
    expect(fair["search-a"]).to_have_text("4")
    expect(fair["search-b"]).to_have_text("4")
    expect(page.locator("#weight-ml-search")).to_have_count(0)  # their own department's weight is its parent's call
    console.shot("tree-even")

    weight = page.get_by_label("Weight of search-a")
    weight.fill("123456")  # past the field's 5 whole digits (the browser itself refuses a negative one)
    weight.locator("xpath=..").get_by_role("button", name="Set").click()
    expect(page.locator("#weight-search-a-error")).to_contain_text("no more than 5 digits before the decimal point")
    console.shot("tree-bad-weight")
    assert Department.objects.get(name="search-a").weight == 1

    page.get_by_label("Weight of search-a").fill("3")
    page.locator('tr[data-node="search-a"]').get_by_role("button", name="Set").click()
    expect(fair["search-a"]).to_have_text("6")
    expect(fair["search-b"]).to_have_text("2")
    expect(page.locator("#weight-search-a-error")).to_have_count(0)
    console.shot("tree-weighted")
    assert Department.objects.get(name="search-a").weight == 3

    # a fence on search-b: its work then preempts only inside it
    page.get_by_label("fence search-b").check()
    with page.expect_response(lambda r: r.url.endswith("/quota-tree/search-b/weight/")):
        page.locator('tr[data-node="search-b"]').get_by_role("button", name="Set").click()
    expect(page.locator("#fence-search-b")).to_be_checked()  # (as the swapped-in tree has it)
    assert Department.objects.get(name="search-b").fence

    # a child under a team that runs jobs is refused beside its field; under ml-search it joins the tree
    add = page.locator("form", has=page.get_by_role("heading", name="Add a department"))
    add.get_by_label("Name").fill("search-c")
    add.get_by_label("Under").select_option("search-a")
    add.get_by_role("button", name="Add").click()
    expect(page.locator("#id_child-parent_error")).to_contain_text("search-a has 3 unfinished jobs")
    console.shot("tree-child-refused")
    assert not Department.objects.filter(name="search-c").exists()
    add = page.locator("form", has=page.get_by_role("heading", name="Add a department"))
    add.get_by_label("Under").select_option("ml-search")
    add.get_by_role("button", name="Add").click()
    expect(page.locator('tr[data-node="search-c"]')).to_be_visible()
    expect(page.locator("#tree-forms .messages")).to_have_text("search-c added under ml-search.")
    expect(page.locator("#id_child-parent_error")).to_have_count(0)

    # its quota: a lend limit above own is refused beside it, then set
    quota = page.locator("form", has=page.get_by_role("heading", name="Set a quota"))
    quota.get_by_label("Department").select_option("search-c")
    quota.get_by_label("Resource").select_option("A100")
    quota.get_by_label("Own").fill("2")
    quota.get_by_label("Lend limit").fill("3")
    quota.get_by_role("button", name="Set quota").click()
    expect(page.locator("#id_quota-lend_limit_error")).to_contain_text("must be between 0 and own (2)")
    console.shot("tree-quota-refused")
    quota = page.locator("form", has=page.get_by_role("heading", name="Set a quota"))
    quota.get_by_label("Lend limit").fill("1")
    quota.get_by_role("button", name="Set quota").click()
    expect(page.locator('tr[data-node="search-c"] td.tree-bar').nth(0)).to_contain_text("0/2 used")
    expect(page.locator('tr[data-node="search-c"] td.tree-bar').nth(0)).to_contain_text("lends ≤ 1")
    console.shot("tree-child-added")


@pytest.mark.parametrize("username", ["adam", "otto"])  # a department admin's nav, an operator's (the longest)
@pytest.mark.parametrize("width", [1280, 1400])
def test_the_top_bar_fits_one_line_from_1280_px(world, console, username, width):
    """Since "Quota tree" joined the nav, the top bar wrapped to two lines at 1,400 px."""
    page = console.page
    page.set_viewport_size({"width": width, "height": 800})
    console.sign_in(username)
    console.follow("Quota tree")
    tops = page.eval_on_selector_all(".topbar > *, .topbar nav li, .topbar .who > *",
                                     "els => els.map(e => Math.round(e.getBoundingClientRect().top + "
                                     "e.getBoundingClientRect().height / 2))")
    console.shot(f"top-bar-{width}")
    assert max(tops) - min(tops) <= 4, tops  # every item centred on one line
