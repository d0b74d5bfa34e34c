// course_async.cuh: cp.async copies and their groups (filled in by the async-copy work).
#pragma once
