"""Chinese catalog: labkit/versions.py (the tested torch release). Merged by labkit.i18n.zh (PARTS)."""

MESSAGES = {
    "labkit: this is torch {found}; the course is tested on torch {tested} only. Most "
    "of it may still work; if something fails, try torch {tested} first "
    "(bash scripts/setup installs it).":
        "labkit：当前是 torch {found}；本课程只在 torch {tested} 上测试过。大部分内容可能仍然能用；"
        "如果出了问题，请先换成 torch {tested}（bash scripts/setup 会安装它）。",
}
