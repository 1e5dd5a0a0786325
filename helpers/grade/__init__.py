"""The grader: python -m helpers.grade SUBMISSIONS... --out DIR

    grader   reads, recognises and judges each submission, writes grades.csv and the feedback files
    cases    what the grader asks of each exercise function, and how it judges the answers
    sandbox  runs one submission's code with the strongest isolation this machine allows
    child    the program that runs inside the sandbox (started as a script, never imported by student code)
"""

from helpers.grade.grader import (COURSE_DIR, CourseNotebook, ExerciseInfo, Result, build_job, cells_to_run,
                                  course_notebooks, find_submissions, grade_class, grade_one, judge, main,
                                  read_answers, read_notebook, read_progress, recognise, summary, write_feedback,
                                  write_grades)

__all__ = ["COURSE_DIR", "CourseNotebook", "ExerciseInfo", "Result", "build_job", "cells_to_run", "course_notebooks",
           "find_submissions", "grade_class", "grade_one", "judge", "main", "read_answers", "read_notebook",
           "read_progress", "recognise", "summary", "write_feedback", "write_grades"]
