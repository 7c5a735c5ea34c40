"""A page about the run (issue 46): a subset run of a study file (`regbench experiment run --arms a,b`) is titled,
counted and tabled from what was run; published numbers sit only beside rows of their data set."""

from __future__ import annotations

import json
import shutil

from reports.experiment import load_experiment

RUN_ARMS = ("ckl", "rer_vapr")  # 2 of demo_rl_ablation.yaml's 6 arms


def subset_run(demo_experiment_dir, root):
    """The demo study's records as a 2-arm subset run leaves them: the other arms' runs never requested (no
    eval folder, status `not requested`), index.json's `requested` naming the runs asked for."""
    shutil.copytree(demo_experiment_dir, root)
    index = json.loads((root / "index.json").read_text())
    for r in index["runs"]:
        if r["arm"] not in RUN_ARMS:
            r.update(status="not requested", metrics=None)
            shutil.rmtree(root / r["dir"])
            for s in r["stages"].values():
                s["status"] = "pending"
    index["requested"] = [[r["arm"], r["seed"]] for r in index["runs"] if r["arm"] in RUN_ARMS]
    (root / "index.json").write_text(json.dumps(index))
    return root


def test_a_subset_runs_page_is_titled_counted_and_tabled_from_what_was_run(demo_experiment_dir, tmp_path):
    from reports.build import build_report

    root = subset_run(demo_experiment_dir, tmp_path / "exp")
    exp = load_experiment(root)
    assert [a.name for a in exp.arms] == ["ckl", "rer_vapr"] and exp.study_arms == 6
    assert {r.status for r in exp.runs} == {"complete"} and len(exp.not_requested) == 4 * 3
    page = build_report(root, tmp_path / "report", B=200).read_text(encoding="utf-8")
    title = page.split("<title>")[1].split("</title>")[0]
    assert "Six" not in title and "2 of the study&#x27;s 6 arms" in title
    assert "pending" not in page
    assert "this page shows 2 of the study file&#x27;s 6 arms: its other 12 arm x seed runs were not requested" in page
    results = page.split("<h3>Results (test split)</h3>")[1].split("</table>")[0]
    for arm in exp.index["arms"]:
        assert (f"<td>{arm['label']}" in results) == (arm["name"] in RUN_ARMS), arm["name"]


def test_a_study_file_run_whole_keeps_its_title(demo_experiment_dir):
    exp = load_experiment(demo_experiment_dir)  # no `requested` record: every run was asked for
    assert exp.title.startswith("Six regularizer") and len(exp.arms) == 6 and not exp.not_requested


def test_the_frontier_has_no_proxy_panel_for_an_arm_without_runs(demo_experiment_dir, tmp_path):
    from reports.overoptimization import frontier_rewards

    exp = load_experiment(subset_run(demo_experiment_dir, tmp_path / "exp"))
    exp.arms.append(type(exp.arms[0])("ghost", "ghost"))  # an arm of the index with no run (an older page's case)
    assert frontier_rewards(exp) == ["bleu4"]


def test_published_numbers_of_another_data_set_are_not_under_ours(experiment_dir, mimic_experiment_dir):
    from reports.tables import default_spec, published_apart_rows, results_frame, wide_rows

    exp = load_experiment(experiment_dir)  # phantom runs; the study reproduces REVA-PO Table 4 (MIMIC-CXR)
    spec = default_spec(exp, B=200)
    df = results_frame(exp, spec)
    _, rows = wide_rows(df, spec)
    assert not [r for r in rows if r[1].startswith("paper")]
    title, header, apart = published_apart_rows(df, spec)
    assert "MIMIC-CXR" in title and "not comparable" in title and "phantom" in title and len(apart) >= 1
    assert header[0] == "Paper row"

    exp = load_experiment(mimic_experiment_dir)  # the same runs on MIMIC-CXR: paper rows beside, labelled
    spec = default_spec(exp, B=200)
    df = results_frame(exp, spec)
    _, rows = wide_rows(df, spec)
    papers = [r for r in rows if r[1].startswith("paper")]
    assert papers and all(r[1].endswith("(MIMIC-CXR)") for r in papers)
    assert published_apart_rows(df, spec) is None
